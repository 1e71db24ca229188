"""OpenTelemetry tracing of jobs, attempts and store calls, seen through the SDK's in-memory
exporter as an embedding program would set it up; and no OpenTelemetry at all without it."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from trio_batch import (
    Config,
    FetchFunc,
    Job,
    RetryableError,
    RetryPolicy,
    Store,
    Target,
    Tracing,
    open_runner,
    otel_tracing,
)
from trio_batch._tracing import STORE_OPERATIONS
from trio_batch.store import ClusterStore
from trio_batch.store._protocol import JobStore

from ..support.fakes import FakeClock, ScriptedFetch, urls
from ..support.tracing import memory_provider, spans_named


@pytest.fixture
def traced() -> tuple[TracerProvider, InMemorySpanExporter]:
    return memory_provider()


@pytest.fixture
def exporter(traced: tuple[TracerProvider, InMemorySpanExporter]) -> InMemorySpanExporter:
    return traced[1]


@pytest.fixture
def provider(traced: tuple[TracerProvider, InMemorySpanExporter]) -> TracerProvider:
    return traced[0]


async def run_job(
    store: Store, fetch: FetchFunc, clock: FakeClock, tracing: Tracing, targets: list[Target]
) -> Job | None:
    """Run one job of ``targets`` to its end on a runner of its own; returns it as it ended."""
    async with open_runner(store, fetch, now=clock, tracing=tracing) as runner:
        job_id, _ = await runner.submit("alice", "default", targets)
        return await runner.wait(job_id)


def children_of(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [
        span
        for span in exporter.get_finished_spans()
        if span.parent is not None and span.parent.span_id == parent.context.span_id
    ]


def test_importing_and_running_without_tracing_imports_no_opentelemetry() -> None:
    # A fresh interpreter: this test process has imported OpenTelemetry already.
    program = textwrap.dedent(
        """
        import sys
        import trio
        import trio_batch, trio_batch.cli, trio_batch.http, trio_batch.fetchers
        from trio_batch import Result, Store, Target, open_runner

        async def fetch(target):
            return Result("x")

        async def main():
            async with open_runner(Store.open(), fetch) as runner:
                job_id, _ = await runner.submit("c", "default", [Target("https://a.test/")])
                job = await runner.wait(job_id)
                assert job.targets_done == 1, job

        trio.run(main)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
        print(loaded)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


async def test_a_job_is_a_span_with_a_child_per_attempt_and_store_call(
    store: Store,
    clock: FakeClock,
    fetch: ScriptedFetch,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
) -> None:
    ended = await run_job(store, fetch, clock, otel_tracing(provider), urls("a", "fail", "c"))
    assert ended is not None
    job_id = ended.id

    [job] = spans_named(exporter, "trio_batch.job")
    assert job.parent is None  # a trace of its own
    assert dict(job.attributes or {}) == {
        "trio_batch.job.id": job_id,
        "trio_batch.job.caller_class": "default",
        "trio_batch.job.targets_total": 3,
        "trio_batch.job.targets_done": 3,
        "trio_batch.job.targets_failed": 1,
        "trio_batch.job.status": "partial",
    }
    attempts = sorted(
        (s for s in children_of(exporter, job) if s.name == "trio_batch.attempt"),
        key=lambda s: (s.attributes or {})["trio_batch.target.idx"],
    )
    assert [dict(s.attributes or {}) for s in attempts] == [
        {
            "trio_batch.target.idx": 0,
            "trio_batch.attempt": 1,
            "server.address": "example.test",
            "trio_batch.outcome": "done",
        },
        {
            "trio_batch.target.idx": 1,
            "trio_batch.attempt": 1,
            "server.address": "example.test",
            "trio_batch.outcome": "failed",
            "error.type": "Boom",
        },
        {
            "trio_batch.target.idx": 2,
            "trio_batch.attempt": 1,
            "server.address": "example.test",
            "trio_batch.outcome": "done",
        },
    ]
    assert attempts[1].status.status_code is StatusCode.ERROR
    stored = [s for s in children_of(exporter, job) if s.name == "trio_batch.store record_outcome"]
    assert len(stored) == 3
    assert dict(stored[0].attributes or {}) == {
        "db.system.name": "sqlite",
        "db.operation.name": "record_outcome",
    }
    # Every span of the job's drain is in the job's trace.
    assert job.context is not None
    assert {s.context.trace_id for s in children_of(exporter, job) if s.context} == {
        job.context.trace_id
    }


async def test_the_job_links_to_the_span_it_was_submitted_in(
    store: Store,
    clock: FakeClock,
    fetch: ScriptedFetch,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
) -> None:
    tracer = provider.get_tracer("host")
    async with open_runner(store, fetch, now=clock, tracing=otel_tracing(provider)) as runner:
        with tracer.start_as_current_span("request") as request:
            job_id, _ = await runner.submit("alice", "default", urls("a"))
        await runner.wait(job_id)

    [job] = spans_named(exporter, "trio_batch.job")
    assert [link.context.span_id for link in job.links] == [request.get_span_context().span_id]
    # The job's creation is the request's work: a child of the request's span.
    [create] = spans_named(exporter, "trio_batch.store create_job")
    assert create.parent is not None
    assert create.parent.span_id == request.get_span_context().span_id


async def test_the_full_url_is_recorded_only_when_asked(
    store: Store,
    clock: FakeClock,
    fetch: ScriptedFetch,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
) -> None:
    secret = "https://example.test/a?token=s3cret"
    for full_urls in (False, True):
        tracing = otel_tracing(provider, full_urls=full_urls)
        await run_job(Store.open(), fetch, clock, tracing, [Target(secret)])
        [attempt] = spans_named(exporter, "trio_batch.attempt")
        exporter.clear()
        recorded = [str(v) for v in (attempt.attributes or {}).values()]
        assert any("s3cret" in v for v in recorded) is full_urls


async def test_retry_waits_are_events_of_the_job_span(
    store: Store,
    clock: FakeClock,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = 0

    async def flaky(target: Target) -> object:
        nonlocal calls
        calls += 1
        raise RetryableError("busy")

    policy = RetryPolicy(attempts=3, first_delay=1.0, max_delay=30.0, multiplier=2.0, jitter=0)
    config = Config(retry=policy)
    async with open_runner(
        store,
        flaky,
        config,
        now=clock,
        tracing=otel_tracing(provider),  # type: ignore[arg-type]
    ) as runner:
        job_id, _ = await runner.submit("alice", "default", urls("a"))
        await runner.wait(job_id)

    [job] = spans_named(exporter, "trio_batch.job")
    waits = [(e.name, dict(e.attributes or {})) for e in job.events]
    assert waits == [
        (
            "trio_batch.retry_wait",
            {"trio_batch.target.idx": 0, "trio_batch.attempt": 1, "delay_s": 1.0},
        ),
        (
            "trio_batch.retry_wait",
            {"trio_batch.target.idx": 0, "trio_batch.attempt": 2, "delay_s": 2.0},
        ),
    ]
    attempts = spans_named(exporter, "trio_batch.attempt")
    assert sorted((s.attributes or {})["trio_batch.attempt"] for s in attempts) == [1, 2, 3]
    assert {(s.attributes or {})["error.type"] for s in attempts} == {"RetryableError"}


async def test_a_cancelled_job_span_says_cancelled(
    store: Store,
    clock: FakeClock,
    fetch: ScriptedFetch,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
) -> None:
    targets = urls("a", "b", "c")
    started, release = fetch.gate(targets[0].url)
    async with open_runner(store, fetch, now=clock, tracing=otel_tracing(provider)) as runner:
        job_id, _ = await runner.submit("alice", "default", targets)
        await started.wait()
        assert await runner.cancel(job_id)
        release.set()
        await runner.wait(job_id)

    [job] = spans_named(exporter, "trio_batch.job")
    assert (job.attributes or {})["trio_batch.job.status"] == "cancelled"
    assert (job.attributes or {})["trio_batch.job.targets_done"] == 1


async def test_a_job_stopped_by_shutdown_ends_failed_and_its_attempt_interrupted(
    store: Store,
    clock: FakeClock,
    fetch: ScriptedFetch,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
) -> None:
    [target] = urls("hang")
    started = fetch.watch(target.url)
    async with open_runner(store, fetch, now=clock, tracing=otel_tracing(provider)) as runner:
        await runner.submit("alice", "default", [target])
        await started.wait()

    [job] = spans_named(exporter, "trio_batch.job")
    assert (job.attributes or {})["trio_batch.job.status"] == "failed"
    assert job.status.status_code is StatusCode.ERROR
    [attempt] = spans_named(exporter, "trio_batch.attempt")
    assert (attempt.attributes or {})["trio_batch.outcome"] == "interrupted"


async def test_store_calls_outside_any_span_make_no_span(
    store: Store,
    clock: FakeClock,
    fetch: ScriptedFetch,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
) -> None:
    async with open_runner(store, fetch, now=clock, tracing=otel_tracing(provider)) as runner:
        job_id, _ = await runner.submit("alice", "default", urls("a"))
        await runner.wait(job_id)
        await runner.status(job_id)  # a read outside any span: no root span of its own
    names = {s.name for s in exporter.get_finished_spans() if s.parent is None}
    assert names == {"trio_batch.job"}


async def test_store_spans_can_be_left_out(
    store: Store,
    clock: FakeClock,
    fetch: ScriptedFetch,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
) -> None:
    await run_job(store, fetch, clock, otel_tracing(provider, store_spans=False), urls("a", "b"))
    names = sorted(span.name for span in exporter.get_finished_spans())
    assert names == ["trio_batch.attempt", "trio_batch.attempt", "trio_batch.job"]


async def test_a_url_that_does_not_parse_is_traced_without_a_host(
    store: Store,
    clock: FakeClock,
    fetch: ScriptedFetch,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
) -> None:
    # Accepted at submit, but urlsplit raises on it: the trace must not fail the job.
    targets = [Target("http://[::1/"), *urls("b")]
    job = await run_job(store, fetch, clock, otel_tracing(provider), targets)
    assert job is not None
    assert (job.status, job.targets_done, job.targets_failed) == ("done", 2, 0)
    hosts = [
        (s.attributes or {}).get("server.address")
        for s in spans_named(exporter, "trio_batch.attempt")
    ]
    assert sorted(hosts, key=str) == [None, "example.test"]


def test_every_bounded_call_of_the_store_interface_is_wrapped() -> None:
    calls = {
        name
        for protocol in (JobStore, ClusterStore)
        for name in dir(protocol)
        if not name.startswith("_") and inspect.iscoroutinefunction(getattr(protocol, name))
    }
    assert calls - {"listen_changes", "aclose"} == set(STORE_OPERATIONS)


async def test_an_export_and_a_retry_read_in_a_span_are_store_spans_of_it(
    store: Store,
    clock: FakeClock,
    fetch: ScriptedFetch,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
) -> None:
    tracer = provider.get_tracer("the host")
    async with open_runner(store, fetch, now=clock, tracing=otel_tracing(provider)) as runner:
        job_id, _ = await runner.submit("alice", "default", urls("a", "b"))
        job = await runner.wait(job_id)
        assert job is not None
        with tracer.start_as_current_span("export"):
            exported = [target.url async for _, target in runner.export(job, merged=True)]
    assert exported == [t.url for t in urls("a", "b")]
    [export] = spans_named(exporter, "export")
    named = {"trio_batch.store get_targets_after", "trio_batch.store retries"}
    reads = [s for s in exporter.get_finished_spans() if s.name in named]
    assert {s.name for s in reads} == named
    assert all(s.parent is not None and s.parent.span_id == export.context.span_id for s in reads)
