"""``serve`` and ``run`` export traces over OTLP/HTTP to a real receiver on 127.0.0.1, set up
from the OTEL_* environment variables; and the set-up's refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from trio_batch._tracing import NO_TRACING
from trio_batch.cli._telemetry import setup_tracing

from ..support.http_fixtures import ALICE, REPO, start_server, stop_server
from ..support.local_server import LocalServer, server
from ..support.otlp_receiver import attributes, otlp_receiver

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"

#: Export soon after each span ends, so a test does not wait on the SDK's default 5 s; and
#: straight to the receiver, never through a proxy the environment may name.
__all__ = ["server"]  # the fixture, imported for pytest

FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "50", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


def test_serve_exports_a_job_trace_linked_to_the_submitting_request(tmp_path: Path) -> None:
    with otlp_receiver() as (endpoint, received):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, **FAST_EXPORT}
        proc, url = start_server(tmp_path, env=env)
        try:
            with httpx.Client(base_url=url, timeout=60) as client:
                targets = [
                    {"url": "https://example.test/a?key=s3cret"},
                    {"url": "https://example.test/fail"},
                ]
                answer = client.post(
                    "/v1/batches",
                    json={"targets": targets},
                    headers={
                        "Authorization": f"Bearer {ALICE}",
                        "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
                    },
                )
                assert answer.status_code == 201, answer.text
                job_id = answer.json()["id"]
                received.wait_for(lambda spans: any(s.name == "trio_batch.job" for s in spans))
        finally:
            stop_server(proc)  # which flushes the spans left
    spans = [span for _, span in received.spans]

    [job] = [s for s in spans if s.name == "trio_batch.job"]
    assert [(link.trace_id.hex(), link.span_id.hex()) for link in job.links] == [
        (TRACE_ID, PARENT_ID)
    ]
    assert job.trace_id.hex() != TRACE_ID  # a trace of its own
    job_attributes = attributes(job.attributes)
    assert job_attributes["trio_batch.job.id"] == job_id
    assert job_attributes["trio_batch.job.status"] == "partial"
    assert job_attributes["trio_batch.job.targets_failed"] == 1
    attempts = [s for s in spans if s.name == "trio_batch.attempt"]
    assert {s.parent_span_id for s in attempts} == {job.span_id}
    assert sorted(attributes(s.attributes)["trio_batch.outcome"] for s in attempts) == [
        "done",
        "failed",
    ]
    assert all("s3cret" not in str(attributes(s.attributes)) for s in spans)
    # The job's creation is the request's work: in the caller's trace, under its span.
    [create] = [s for s in spans if s.name == "trio_batch.store create_job"]
    assert (create.trace_id.hex(), create.parent_span_id.hex()) == (TRACE_ID, PARENT_ID)
    with received.changed:
        resources = {str(resource.get("service.name")) for resource, _ in received.spans}
    assert resources == {"trio-batch"}


def test_serve_with_the_sdk_disabled_exports_nothing(tmp_path: Path) -> None:
    with otlp_receiver() as (endpoint, received):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "true"}
        proc, url = start_server(tmp_path, "--otel", env={**env, **FAST_EXPORT})
        try:
            with httpx.Client(base_url=url, timeout=60) as client:
                answer = client.post(
                    "/v1/batches",
                    json={"targets": [{"url": "https://example.test/a"}]},
                    headers={"Authorization": f"Bearer {ALICE}"},
                )
                assert answer.status_code == 201, answer.text
                job_id = answer.json()["id"]
                events = client.get(
                    f"/v1/batches/{job_id}/events", headers={"Authorization": f"Bearer {ALICE}"}
                )
                assert "event: job" in events.text
        finally:
            stop_server(proc)  # which flushes what spans there are
        assert received.spans == []


def test_run_with_otel_exports_the_job_trace(server: LocalServer, tmp_path: Path) -> None:
    batch = tmp_path / "batch.txt"
    batch.write_text(f"{server.url('/text.txt')}\n")
    with otlp_receiver() as (endpoint, received):
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{endpoint}/v1/traces",
            "OTEL_SERVICE_NAME": "my-batch",
            **FAST_EXPORT,
        }
        done = subprocess.run(
            [
                str(Path(sys.executable).with_name("trio-batch")),
                "run",
                str(batch),
                "--db",
                str(tmp_path / "jobs.db"),
                "--otel",
                "-q",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        # run flushes its spans before it exits: they are all there already.
        with received.changed:
            names = sorted(span.name for _, span in received.spans)
            services = {str(resource.get("service.name")) for resource, _ in received.spans}
    assert names.count("trio_batch.job") == 1
    assert names.count("trio_batch.attempt") == 1
    assert services == {"my-batch"}


def test_otel_without_the_sdk_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    with pytest.raises(ValueError, match=r"trio-batch\[otel-sdk\]"):
        setup_tracing(True, {})
    # Asked by the environment only: as without it, no error.
    tracing, _ = setup_tracing(False, {"OTEL_TRACES_EXPORTER": "otlp"})
    assert tracing is NO_TRACING


def test_unsupported_exporters_and_protocols_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported exporter 'zipkin'"):
        setup_tracing(True, {"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(ValueError, match="only http/protobuf"):
        setup_tracing(True, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


def test_tracing_is_off_unless_asked_or_when_disabled() -> None:
    assert setup_tracing(False, {})[0] is NO_TRACING
    disabled = {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}
    assert setup_tracing(True, disabled)[0] is NO_TRACING
