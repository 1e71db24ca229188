"""``--log-format json``: one object a line, with the job id, idx and trace id, redacted as
the plain format is (no URL beyond its origin, no token)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
from opentelemetry.sdk.trace import TracerProvider

from trio_batch import otel_tracing
from trio_batch.cli._logs import JsonFormatter

from ..support.http_fixtures import ALICE, start_server, stop_server
from ..support.local_server import LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def record(message: str, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("trio_batch", logging.INFO, __file__, 1, message, (), None)
    made.__dict__.update(extra)
    return made


def test_a_line_carries_the_known_fields_and_not_the_error_text() -> None:
    line = json.loads(
        JsonFormatter().format(
            record("target failed", job_id="j1", idx=3, error="E: https://h/p?token=s3cret")
        )
    )
    assert line["event"] == "target failed"
    assert (line["job_id"], line["idx"], line["level"], line["logger"]) == (
        "j1",
        3,
        "INFO",
        "trio_batch",
    )
    assert line["time"].endswith("Z")
    assert "s3cret" not in json.dumps(line)
    assert "trace_id" not in line


def test_a_line_written_inside_a_span_carries_its_trace_id() -> None:
    provider = TracerProvider()
    otel_tracing(provider)  # the tracer log lines ask for the current span
    with provider.get_tracer("t").start_as_current_span("s") as span:
        line = json.loads(JsonFormatter().format(record("hello\nworld")))
    assert line["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert line["event"] == "hello\nworld"  # escaped by JSON: still one line


def test_serve_logs_json_lines_redacted_and_traced(server: LocalServer, tmp_path: Path) -> None:
    proc, url = start_server(
        tmp_path,
        "--allow-private",
        "--log-format",
        "json",
        "--otel",
        fetch=None,  # the built-in fetcher, whose requests httpx logs
        env={"OTEL_TRACES_EXPORTER": "none", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"},
    )
    headers = {"Authorization": f"Bearer {ALICE}"}
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            answer = client.post(
                "/v1/batches",
                json={"targets": [{"url": server.url("/text.txt?token=s3cret")}]},
                headers={**headers, "traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"},
            )
            assert answer.status_code == 201, answer.text
            job_id = answer.json()["id"]
            events = client.get(f"/v1/batches/{job_id}/events", headers=headers)
            assert "event: job" in events.text
    finally:
        stderr = stop_server(proc)
    assert "s3cret" not in stderr and ALICE not in stderr
    lines = [json.loads(text) for text in stderr.splitlines()]  # every line is JSON
    by_event = {line["event"]: line for line in lines if line.get("job_id") == job_id}
    # Submitted within the request: the request's trace; finished in the job's own trace.
    assert by_event["job submitted"]["trace_id"] == TRACE_ID
    finished = by_event["job finished"]
    assert finished["status"] == "done"
    assert len(finished["trace_id"]) == 32 and finished["trace_id"] != TRACE_ID
    requests = [line for line in lines if line["logger"] == "httpx"]
    assert requests, lines
    assert all(server.url("/text.txt") not in line["event"] for line in requests)
