"""/metrics: fetch times and attempts by outcome, store-call times by backend and operation,
and, with a tracer on, exemplars that name the trace (in the OpenMetrics format)."""

from __future__ import annotations

import re
from pathlib import Path

from trio_batch import otel_tracing

from ..support.fakes import FakeClock, ScriptedFetch
from ..support.tracing import memory_provider
from .test_http import running
from .test_http_hardening import metric


async def test_fetches_attempts_and_store_calls_are_measured(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        job_id = (await svc.submit("a", "b/fail", "c"))["id"]
        await svc.wait_done(job_id)
        text = (await svc.client.get("/metrics")).text
    assert metric(text, "trio_batch_fetch_seconds_count", outcome="done") == 2
    assert metric(text, "trio_batch_fetch_seconds_count", outcome="failed") == 1
    assert metric(text, "trio_batch_attempts_total", outcome="done", error_type="") == 2
    assert metric(text, "trio_batch_attempts_total", outcome="failed", error_type="Boom") == 1
    calls = "trio_batch_store_call_seconds_count"
    assert metric(text, calls, backend="sqlite", operation="record_outcome") == 3
    assert metric(text, calls, backend="sqlite", operation="create_job") == 1


async def test_exemplars_carry_the_trace_id_in_openmetrics(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    provider, exporter = memory_provider()
    async with running(tmp_path, fetch, clock, tracing=otel_tracing(provider)) as svc:
        job_id = (await svc.submit("a"))["id"]
        await svc.wait_done(job_id)
        r = await svc.client.get("/metrics", headers={"Accept": "application/openmetrics-text"})
        plain = (await svc.client.get("/metrics")).text
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    [attempt] = [s for s in exporter.get_finished_spans() if s.name == "trio_batch.attempt"]
    assert attempt.context is not None
    trace_id = f"{attempt.context.trace_id:032x}"
    line = next(
        line for line in r.text.splitlines() if line.startswith("trio_batch_attempts_total{")
    )
    assert re.search(rf'# {{span_id="[0-9a-f]{{16}}",trace_id="{trace_id}"}} 1\.0', line), line
    assert "trace_id" not in plain  # the Prometheus text format has no exemplars
