"""A job's trace context is stored with it: the runner that reaps it after its runner was
SIGKILLed, or that delivers its webhook after a restart, continues the same trace.

The dead runner is a real child process, traced through the SDK's in-memory exporter; it
prints the trace id of the job's span (from inside the attempt, a child of the job's span)
before it is killed. The next runner, on the same SQLite file or PostgreSQL database, is
traced in this process the same way.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trustme
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import format_span_id, format_trace_id

from trio_batch import Config, JobState, Store, open_runner, otel_tracing
from trio_batch.fetchers import DestinationPolicy, WebhookSender
from trio_batch.store import NewJob, open_store

from ..support.deliveries import delivery_reaches
from ..support.fakes import T0, ScriptedFetch, urls
from ..support.tracing import memory_provider, spans_named
from ..support.webhook_receiver import Receiver

CHILD = """
import ssl, sys, trio
from trio_batch import Config, Result, Store, Target, open_runner, otel_tracing
from trio_batch._tracing import current_ids
from trio_batch.store import open_store
from trio_batch.fetchers import DestinationPolicy, WebhookSender
from opentelemetry.sdk.trace import TracerProvider

location, mode, url, secret, ca = sys.argv[1:]

class Stalled(WebhookSender):
    async def deliver(self, event):
        print("delivering", flush=True)  # the terminal status is committed
        await trio.sleep_forever()

async def fetch(target):
    print(current_ids()[0], flush=True)  # in the attempt's span: the job's trace
    if mode == "hang":
        await trio.sleep_forever()
    return Result("ok")

async def main():
    sender = None
    if mode == "webhook":
        context = ssl.create_default_context(cafile=ca)
        sender = Stalled(secret, DestinationPolicy(allow_private=True), ssl_context=context)
    store = Store.open(location) if "://" not in location else open_store(location)
    tracing = otel_tracing(TracerProvider())
    config = Config(heartbeat_interval=0.2, runner_timeout=1.0)
    async with open_runner(store, fetch, config=config, tracing=tracing, webhooks=sender) as r:
        await r.submit(
            "alice", "user", [Target("https://example.test/1")],
            webhook=url if mode == "webhook" else None,
        )
        await trio.sleep_forever()

trio.run(main)
"""


def run_child(args: list[str], wait_for: str | None) -> str:
    """Run the child until its job's trace id is printed (then, if ``wait_for``, until a line
    starting so), SIGKILL it; returns the trace id."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        trace_id = child.stdout.readline().strip()
        if wait_for is not None:
            line = child.stdout.readline()
            while not line.startswith(wait_for):
                assert line, "the child ended"
                line = child.stdout.readline()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(trace_id) == 32, trace_id
    return trace_id


async def killed_child(location: str, mode: str = "hang", *extra: str) -> str:
    args = [location, mode, *(extra or ("", "", ""))]
    wait_for = "delivering" if mode == "webhook" else None
    return await trio.to_thread.run_sync(run_child, args, wait_for)


CAPS = {"targets_per_job": 10, "jobs_per_caller": 10, "jobs_total": 10}


async def reaped_span_appears(exporter: InMemorySpanExporter) -> None:
    # A condition, polled: the exporter has no event to wait on.
    while not spans_named(exporter, "trio_batch.job reaped"):  # noqa: ASYNC110
        await trio.sleep(0.05)


async def test_the_runner_reaping_a_killed_runners_job_on_sqlite_continues_its_trace(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    trace_id = await killed_child(str(path))
    provider, exporter = memory_provider()
    async with open_runner(Store.open(path), ScriptedFetch(), tracing=otel_tracing(provider)):
        pass
    (reaped,) = spans_named(exporter, "trio_batch.job reaped")
    assert reaped.context is not None and reaped.parent is not None
    assert format_trace_id(reaped.context.trace_id) == trace_id
    assert reaped.parent.is_remote  # a child of the dead runner's job span
    with Store.open(path) as store:
        (job,) = store.list_jobs()
        assert (job.status, job.error) == (JobState.FAILED, "restart")
    assert reaped.attributes is not None and reaped.attributes["trio_batch.job.id"] == job.id


async def test_the_runner_reaping_a_killed_peers_job_on_postgresql_continues_its_trace(
    pg_dsn: str,
) -> None:
    provider, exporter = memory_provider()
    config = Config(heartbeat_interval=0.2, runner_timeout=1.0)
    tracing = otel_tracing(provider)
    store = open_store(pg_dsn)
    async with open_runner(store, ScriptedFetch(), config=config, tracing=tracing) as runner:
        trace_id = await killed_child(pg_dsn)
        # The peer is silent: this runner's heartbeat reaps its job once runner_timeout passes.
        with trio.fail_after(60):
            await reaped_span_appears(exporter)
        (reaped,) = spans_named(exporter, "trio_batch.job reaped")
        assert reaped.context is not None
        assert format_trace_id(reaped.context.trace_id) == trace_id
        assert reaped.attributes is not None
        found = await runner.status(str(reaped.attributes["trio_batch.job.id"]))
        assert found is not None and (found[0].status, found[0].error) == (
            JobState.FAILED,
            "restart",
        )


async def test_a_webhook_sent_after_a_restart_carries_the_jobs_traceparent(
    tmp_path: Path, receiver: Receiver, webhook_ca: trustme.CA
) -> None:
    pem = tmp_path / "ca.pem"
    webhook_ca.cert_pem.write_to_path(str(pem))
    path = tmp_path / "jobs.db"
    trace_id = await killed_child(str(path), "webhook", receiver.url, receiver.secret, str(pem))
    sender = WebhookSender(
        receiver.secret, DestinationPolicy(allow_private=True), ssl_context=receiver.client_context
    )
    with Store.open(path) as store:
        (job,) = store.list_jobs()
    # This runner traces nothing: the header comes from the context stored with the job.
    async with open_runner(Store.open(path), ScriptedFetch(), webhooks=sender) as runner:
        await delivery_reaches(runner, job.id, state="delivered")
    (got,) = receiver.received
    assert got.verified  # traceparent is outside the signed content
    version, sent_trace_id, _span_id, _flags = got.headers["traceparent"].split("-")
    assert (version, sent_trace_id) == ("00", trace_id)


async def test_a_traced_runners_webhook_delivery_is_a_span_of_the_jobs_trace(
    store: Store, fetch: ScriptedFetch, receiver: Receiver
) -> None:
    provider, exporter = memory_provider()
    sender = WebhookSender(
        receiver.secret, DestinationPolicy(allow_private=True), ssl_context=receiver.client_context
    )
    tracing = otel_tracing(provider)
    async with open_runner(store, fetch, tracing=tracing, webhooks=sender) as runner:
        job_id, _ = await runner.submit("a", "user", urls("x"), webhook=receiver.url)
        await runner.wait(job_id)
        await delivery_reaches(runner, job_id, state="delivered")
    (job_span,) = spans_named(exporter, "trio_batch.job")
    (delivery,) = spans_named(exporter, "trio_batch.webhook delivery")
    assert job_span.context is not None and delivery.context is not None
    assert delivery.parent is not None and delivery.parent.span_id == job_span.context.span_id
    (got,) = receiver.received
    assert got.verified
    version, trace_id, span_id, _flags = got.headers["traceparent"].split("-")
    assert (version, trace_id, span_id) == (
        "00",
        format_trace_id(job_span.context.trace_id),
        format_span_id(delivery.context.span_id),
    )


async def test_without_tracing_nothing_is_stored_and_no_traceparent_is_sent(
    tmp_path: Path, fetch: ScriptedFetch, receiver: Receiver
) -> None:
    sender = WebhookSender(
        receiver.secret, DestinationPolicy(allow_private=True), ssl_context=receiver.client_context
    )
    path = tmp_path / "jobs.db"
    async with open_runner(Store.open(path), fetch, webhooks=sender) as runner:
        job_id, _ = await runner.submit("a", "user", urls("x"), webhook=receiver.url)
        await delivery_reaches(runner, job_id, state="delivered")
    (got,) = receiver.received
    assert got.verified and "traceparent" not in got.headers
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT trace_context FROM jobs").fetchall() == [(None,)]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "01-" + "ab" * 16 + "-" + "cd" * 8 + "-01",  # an unknown version
        "00-" + "0" * 32 + "-" + "cd" * 8 + "-01",  # the invalid trace id
        "00-" + "AB" * 16 + "-" + "cd" * 8 + "-01",  # upper case
        "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01\r\nx-evil: 1",  # a header injection
        "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01" + "x" * 1000,
    ],
)
def test_a_malformed_trace_context_is_refused_before_any_write(store: Store, bad: str) -> None:
    new = NewJob("a", "user", urls("x"), ttl=10, **CAPS, trace_context=bad)
    with pytest.raises(ValueError, match="traceparent"):
        store.create_job(new, now=T0)
    assert store.list_jobs(now=T0) == []


async def test_a_job_cancelled_through_another_runner_ends_its_span_cancelled(
    pg_dsn: str,
) -> None:
    # The drain's runner finishes the job: its span, in the submitter's trace, says cancelled.
    provider, exporter = memory_provider()
    targets = urls("a", "b", "c")
    fetch = ScriptedFetch()
    started, release = fetch.gate(targets[0].url)
    store_a, store_b = open_store(pg_dsn), open_store(pg_dsn)
    async with (
        open_runner(store_a, fetch, tracing=otel_tracing(provider)) as a,
        open_runner(store_b, ScriptedFetch()) as b,
    ):
        job_id, _ = await a.submit("alice", "default", targets)
        await started.wait()
        assert await b.cancel(job_id)
        release.set()
        with trio.fail_after(60):
            await a.wait(job_id)
    (job,) = spans_named(exporter, "trio_batch.job")
    attributes = job.attributes or {}
    assert attributes["trio_batch.job.id"] == job_id
    assert attributes["trio_batch.job.status"] == "cancelled"
    assert attributes["trio_batch.job.targets_done"] == 1
    await store_a.aclose()
    await store_b.aclose()
