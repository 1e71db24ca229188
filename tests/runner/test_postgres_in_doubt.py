"""A submit whose create the PostgreSQL server committed, but whose answer was lost with its
connection: the caller gets :class:`StoreUnavailable`, yet the job exists, live and owned by
the runner that created it. That runner's poll adopts it (``JobStore.undrained_jobs``) and
drains it to the end, whether the caller retries, another runner reuses it, or nobody asks.

The loss is real: a TCP proxy (``cuttable_proxy.py``) delays every chunk, and its connections
are cut once the job is seen committed from another connection, before the answer comes back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio
import trio.testing

from trio_batch import (
    Config,
    Job,
    JobStore,
    Runner,
    StoreUnavailable,
    Target,
    open_runner,
    open_store,
    otel_tracing,
)

from ..support.cuttable_proxy import CuttableProxy
from ..support.fakes import ScriptedFetch, urls
from ..support.pg_server import through
from ..support.tracing import memory_provider, spans_named
from .test_postgres_cluster import DEADLINE, _job, _outcomes, _sql

#: Seconds each chunk through the proxy waits during the create: the time the test has to see
#: the commit and cut before the answer arrives (it polls every few milliseconds).
DELAY = 1.0
CONFIG = Config(poll_interval=0.05)
#: The bound on each call of the runner behind the proxy: the create may queue behind a poll
#: read, each chunk of both delayed DELAY: well within this, however loaded the machine.
STORE_TIMEOUT = 30.0


def _behind(proxy: CuttableProxy, dsn: str) -> JobStore:
    """The store of ``dsn``'s database reached through ``proxy``."""
    return open_store(through(proxy, dsn), store_timeout=STORE_TIMEOUT)


def _committed(dsn: str, caller: str) -> str:
    """The id of ``caller``'s job once it is committed (seen from another connection)."""
    deadline = time.monotonic() + DEADLINE
    while not (rows := _sql(dsn, "SELECT id FROM jobs WHERE caller = %s", (caller,))):
        assert time.monotonic() < deadline, "timed out waiting for the create to commit"
        time.sleep(0.005)
    return str(rows[0][0])


async def _submit_in_doubt(
    runner: Runner,
    proxy: CuttableProxy,
    dsn: str,
    targets: Sequence[Target],
    *,
    meanwhile: Callable[[str], Awaitable[None]] | None = None,
) -> str:
    """Submit ``targets`` for alice through ``runner`` (its store behind ``proxy``), cutting
    the connection once the job is committed, before the answer: StoreUnavailable. Returns the
    job's id. ``meanwhile(job_id)`` runs once the job is committed, before the cut."""
    committed: list[str] = []

    async def cut_once_committed() -> None:
        committed.append(await trio.to_thread.run_sync(_committed, dsn, "alice"))
        if meanwhile is not None:
            await meanwhile(committed[0])
        proxy.cut()  # the answer is still in the proxy: the client's connection drops
        proxy.latency = 0.0

    async with trio.open_nursery() as nursery:
        proxy.latency = DELAY
        nursery.start_soon(cut_once_committed)
        with pytest.raises(StoreUnavailable):
            await runner.submit("alice", "user", targets)
    return committed[0]


@contextlib.asynccontextmanager
async def _owner_and_other(
    proxy: CuttableProxy, dsn: str, fetch: ScriptedFetch, other_fetch: ScriptedFetch
) -> AsyncIterator[tuple[Runner, Runner]]:
    """A runner behind ``proxy`` (the one whose create is lost), and another, direct."""
    async with (
        _behind(proxy, dsn) as store,
        open_runner(store, fetch, CONFIG) as runner,
        open_store(dsn) as other_store,
        open_runner(other_store, other_fetch, CONFIG) as other,
    ):
        yield runner, other


def _drained(dsn: str, job_id: str, total: int) -> None:
    assert _job(dsn, job_id) == ("done", None, total)
    assert [o[1] for o in _outcomes(dsn, job_id)] == ["done"] * total


async def test_a_create_committed_but_lost_with_its_connection_is_drained_after_the_retry(
    pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    targets = urls("a", "b", "c")
    async with (
        _behind(pg_proxy, pg_dsn) as store,
        open_runner(store, ScriptedFetch(), CONFIG) as runner,
    ):
        job_id = await _submit_in_doubt(runner, pg_proxy, pg_dsn, targets)
        assert await runner.submit("alice", "user", targets) == (job_id, True)
        with trio.fail_after(DEADLINE):  # a bound on a hang, not a speed check
            job = await runner.wait(job_id)
        assert job is not None and job.status == "done"
    _drained(pg_dsn, job_id, len(targets))


@pytest.mark.parametrize("reused", [False, True], ids=["nobody-asks", "reused-elsewhere"])
async def test_a_create_lost_is_drained_by_its_owner_and_waited_for_elsewhere(
    pg_dsn: str, pg_proxy: CuttableProxy, reused: bool
) -> None:
    # No retry through the owner: nobody asks, or another runner's submit reuses the job. The
    # owner's poll finds it live and undrained, and drains it; the other runner's wait sees
    # it end.
    targets = urls("a", "b", "c")
    fetch, other_fetch = ScriptedFetch(), ScriptedFetch()
    async with _owner_and_other(pg_proxy, pg_dsn, fetch, other_fetch) as (runner, other):
        job_id = await _submit_in_doubt(runner, pg_proxy, pg_dsn, targets)
        if reused:
            assert await other.submit("alice", "user", targets) == (job_id, True)
        with trio.fail_after(DEADLINE):  # a bound on a hang, not a speed check
            job = await other.wait(job_id)
        assert job is not None and job.status == "done" and job.targets_done == len(targets)
        # Each fetched once, by its owner.
        assert (fetch.calls, other_fetch.calls) == ([t.url for t in targets], [])
    _drained(pg_dsn, job_id, len(targets))


async def test_a_wait_and_a_watch_begun_while_the_create_was_in_doubt_see_the_job_end(
    pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    # Both began on the drain registered for the create; the create raised and dropped it
    # while the job lived on. The wait answered the job as "running", the watch hung.
    targets = urls("a", "b")
    waited: list[Job | None] = []
    watched: list[object] = []
    async with (
        _behind(pg_proxy, pg_dsn) as store,
        open_runner(store, ScriptedFetch(), CONFIG) as runner,
    ):

        async def wait(job_id: str) -> None:
            waited.append(await runner.wait(job_id))

        async def watch(job_id: str) -> None:
            watched.extend([item async for item in runner.watch(job_id)])

        with trio.fail_after(DEADLINE):  # a bound on a hang, not a speed check
            async with trio.open_nursery() as nursery:

                async def begin_waiting(job_id: str) -> None:
                    nursery.start_soon(wait, job_id)
                    nursery.start_soon(watch, job_id)
                    await trio.testing.wait_all_tasks_blocked()  # both on the create's drain

                job_id = await _submit_in_doubt(
                    runner, pg_proxy, pg_dsn, targets, meanwhile=begin_waiting
                )
    assert waited[0] is not None and waited[0].status == "done"
    assert [getattr(item, "idx", None) for item in watched] == [0, 1, None]
    end = watched[-1]
    assert isinstance(end, Job) and end.status == "done"
    _drained(pg_dsn, job_id, len(targets))


async def test_a_job_adopted_then_cancelled_through_another_runner_stops_like_any_other(
    pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    targets = urls("a", "b", "c")
    fetch = ScriptedFetch()
    started, release = fetch.gate(targets[0].url)
    async with _owner_and_other(pg_proxy, pg_dsn, fetch, ScriptedFetch()) as (runner, other):
        job_id = await _submit_in_doubt(runner, pg_proxy, pg_dsn, targets)
        with trio.fail_after(DEADLINE):  # a bound on a hang, not a speed check
            await started.wait()  # adopted: its first target is being fetched
            assert await other.cancel(job_id)
            release.set()
            job = await other.wait(job_id)
        assert job is not None and job.status == "cancelled"
        assert fetch.calls == [targets[0].url]
    assert [o[1] for o in _outcomes(pg_dsn, job_id)] == ["done", "pending", "pending"]


async def test_a_job_adopted_by_the_poll_has_the_span_of_a_submitted_one(
    pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    # The submit's span was dropped with its answer; the adopted drain had none, so the job,
    # its attempts and its store calls were not traced at all.
    provider, exporter = memory_provider()
    targets = urls("a", "b")
    async with (
        _behind(pg_proxy, pg_dsn) as store,
        open_runner(store, ScriptedFetch(), CONFIG, tracing=otel_tracing(provider)) as runner,
    ):
        job_id = await _submit_in_doubt(runner, pg_proxy, pg_dsn, targets)
        with trio.fail_after(DEADLINE):  # a bound on a hang, not a speed check
            job = await runner.wait(job_id)
        assert job is not None and job.status == "done"
    [span] = spans_named(exporter, "trio_batch.job")
    assert dict(span.attributes or {}) == {
        "trio_batch.job.id": job_id,
        "trio_batch.job.caller_class": "user",
        "trio_batch.job.targets_total": 2,
        "trio_batch.job.targets_done": 2,
        "trio_batch.job.targets_failed": 0,
        "trio_batch.job.status": "done",
    }
    assert span.context is not None
    attempts = [
        s
        for s in spans_named(exporter, "trio_batch.attempt")
        if s.parent is not None and s.parent.span_id == span.context.span_id
    ]
    assert sorted((s.attributes or {})["trio_batch.target.idx"] for s in attempts) == [0, 1]


def _held_in_step(
    store: JobStore, mine: trio.Event, others: Sequence[trio.Event], after: trio.Event
) -> None:
    """The first poll read of ``store``'s undrained jobs begun once ``after`` is set waits
    until every runner's has begun (``mine`` set, then ``others``): the reads run together."""
    real = store.undrained_jobs

    async def undrained_jobs(
        draining: Sequence[str], *, now: float, limit: int
    ) -> list[tuple[Job, tuple[Target, ...]]]:
        if after.is_set() and not mine.is_set():
            mine.set()
            for event in others:
                await event.wait()
        return await real(draining, now=now, limit=limit)

    store.undrained_jobs = undrained_jobs  # type: ignore[method-assign]


async def test_two_runners_polling_at_once_adopt_a_lost_create_once(
    pg_dsn: str, pg_proxy: CuttableProxy, caplog: pytest.LogCaptureFixture
) -> None:
    # Once the create's answer is lost, both runners' polls read the undrained jobs at the
    # same moment: only the job's owner adopts it, once; each target is fetched once.
    targets = urls("a", "b", "c")
    fetch, other_fetch = ScriptedFetch(), ScriptedFetch()
    lost, in_a, in_b = trio.Event(), trio.Event(), trio.Event()
    async with (
        _behind(pg_proxy, pg_dsn) as store,
        open_runner(store, fetch, CONFIG) as runner,
        open_store(pg_dsn) as other_store,
        open_runner(other_store, other_fetch, CONFIG) as other,
    ):
        _held_in_step(store, in_a, [in_a, in_b], lost)
        _held_in_step(other_store, in_b, [in_a, in_b], lost)
        job_id = await _submit_in_doubt(runner, pg_proxy, pg_dsn, targets)
        lost.set()
        with trio.fail_after(DEADLINE):  # a bound on a hang, not a speed check
            await in_a.wait()
            await in_b.wait()
            job = await other.wait(job_id)
        assert job is not None and job.status == "done"
    adopted = [r for r in caplog.records if r.getMessage().startswith("job created but its")]
    assert [getattr(r, "job_id", None) for r in adopted] == [job_id]
    assert (fetch.calls, other_fetch.calls) == ([t.url for t in targets], [])
    _drained(pg_dsn, job_id, len(targets))


async def test_a_wait_begun_before_the_adoption_returns_after_its_last_outcome(
    pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    # Begun while the create was in doubt, the wait reads the job as one this runner does not
    # drain; the poll then adopts it, and it is cancelled while its first target is fetched.
    # The store answers the drain over (the job is this runner's), yet the adopted drain
    # still stores that target's outcome: the wait must not return before it.
    targets = urls("a", "b")
    fetch = ScriptedFetch()
    started, release = fetch.gate(targets[0].url)
    waited: list[Job | None] = []
    async with _owner_and_other(pg_proxy, pg_dsn, fetch, ScriptedFetch()) as (runner, other):
        store = runner._store
        answered_over = trio.Event()
        drain_over = store.drain_over

        async def observed_drain_over(job_id: str) -> bool:
            over = await drain_over(job_id)
            if over:  # the wait's, once the job is cancelled
                answered_over.set()
            return over

        store.drain_over = observed_drain_over  # type: ignore[method-assign]

        async def wait(job_id: str) -> None:
            waited.append(await runner.wait(job_id))

        with trio.fail_after(DEADLINE):  # a bound on a hang, not a speed check
            async with trio.open_nursery() as nursery:

                async def begin_waiting(job_id: str) -> None:
                    nursery.start_soon(wait, job_id)
                    await trio.testing.wait_all_tasks_blocked()  # on the create's drain

                job_id = await _submit_in_doubt(
                    runner, pg_proxy, pg_dsn, targets, meanwhile=begin_waiting
                )
                await started.wait()  # adopted: its first target is being fetched
                assert await other.cancel(job_id)
                await answered_over.wait()
                release.set()
    assert _job(pg_dsn, job_id) == ("cancelled", None, 1)
    assert waited[0] is not None and waited[0].targets_done == 1


async def test_a_create_lost_then_cancelled_before_its_adoption_is_released(
    pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    # Cancelled through another runner while the create's answer is still on its way: the
    # poll finds no live job to adopt, so nothing drains the job, nor releases it.
    targets = urls("a", "b")
    fetch = ScriptedFetch()
    async with _owner_and_other(pg_proxy, pg_dsn, fetch, ScriptedFetch()) as (runner, other):

        async def cancel(job_id: str) -> None:
            assert await other.cancel(job_id)

        job_id = await _submit_in_doubt(runner, pg_proxy, pg_dsn, targets, meanwhile=cancel)
        with trio.fail_after(DEADLINE):  # a bound on a hang, not a speed check
            job = await other.wait(job_id)
        assert job is not None and job.status == "cancelled"
        assert fetch.calls == []


async def test_a_watch_whose_read_spans_the_adoption_yields_its_last_outcome(
    pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    # The watch looks up the job's drain (none: the create just raised), and its read comes
    # back (held here) only once the poll has adopted the job and it is cancelled, its first
    # target in flight. The store answers the drain over (the job is this runner's); the
    # adopted drain still stores that target's outcome, which the watch must yield.
    targets = urls("a", "b")
    fetch = ScriptedFetch()
    started, release = fetch.gate(targets[0].url)
    watched: list[object] = []
    async with _owner_and_other(pg_proxy, pg_dsn, fetch, ScriptedFetch()) as (runner, other):
        store = runner._store
        read_held, read_go, read_done = trio.Event(), trio.Event(), trio.Event()
        get_outcomes = store.get_outcomes

        async def held_get_outcomes(job_id: str, *args: Any, **kwargs: Any) -> Any:
            if job_id in runner._drains or read_held.is_set():
                return await get_outcomes(job_id, *args, **kwargs)
            read_held.set()
            await read_go.wait()
            try:
                return await get_outcomes(job_id, *args, **kwargs)
            finally:
                read_done.set()

        store.get_outcomes = held_get_outcomes  # type: ignore[method-assign]

        async def watch(job_id: str) -> None:
            watched.extend([item async for item in runner.watch(job_id)])

        with trio.fail_after(DEADLINE):  # a bound on a hang, not a speed check
            async with trio.open_nursery() as nursery:

                async def begin_watching(job_id: str) -> None:
                    nursery.start_soon(watch, job_id)
                    await trio.testing.wait_all_tasks_blocked()  # on the create's drain

                job_id = await _submit_in_doubt(
                    runner, pg_proxy, pg_dsn, targets, meanwhile=begin_watching
                )
                await read_held.wait()
                await started.wait()  # adopted: its first target is being fetched
                assert await other.cancel(job_id)
                read_go.set()
                await read_done.wait()
                release.set()
    assert _job(pg_dsn, job_id) == ("cancelled", None, 1)
    assert [getattr(item, "idx", None) for item in watched] == [0, None]
