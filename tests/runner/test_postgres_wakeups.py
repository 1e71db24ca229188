"""A wait on a job another runner drains is woken by whatever ends that drain: the job's last
outcome (``test_postgres_listen``), and here the drain's runner shutting down or being reaped
after a SIGKILL, a forget of the job, and its lease lapsing.

The waiting runner polls every ``POLL_NEVER`` seconds, twice as long as any wait here may last
(``DEADLINE``, after which it fails): a wait that ends in time was woken by a notification (or,
for a lapse, by the lease it read).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import psycopg
import pytest
import trio

from trio_batch import Config, Job, JobState, Runner, open_runner
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresJobStore, PostgresStore

from ..store.test_postgres_listen import _notified
from ..support.fakes import T0, ScriptedFetch, urls
from . import test_postgres_cluster as cluster
from .test_postgres_cluster import DEADLINE, Child, _sql, _until, _urls

#: A poll so rare that no wait here could end by it before its deadline.
POLL_NEVER = 2 * DEADLINE
#: The drain's runner: a cancelled job's fetch in flight runs on (its grace outlasts the test).
OWNER = Config(poll_interval=POLL_NEVER, cancel_grace=POLL_NEVER)
WAITER = Config(poll_interval=POLL_NEVER)

#: Runner processes on the test's database: the multi-runner tests' fixture.
spawn = cluster.spawn


def _waited(dsn: str, job_id: str) -> bool:
    """Whether a runner registered a wait on the job (schema v12)."""
    rows = _sql(dsn, "SELECT waited FROM jobs WHERE id = %s", (job_id,))
    return bool(rows and rows[0][0])


async def _watched(b: Runner, job_id: str) -> Job | None:
    """What ``b.watch`` ends with: the terminal job, or None if it stopped without one."""
    last = None
    async for item in b.watch(job_id):
        last = item
    return last if isinstance(last, Job) else None


@contextlib.asynccontextmanager
async def _waiting(
    b: Runner, job_id: str, dsn: str, *, watch: bool = False
) -> AsyncIterator[list[Job | None]]:
    """B waits on ``job_id`` (or watches it) during the block (once its wait is registered in
    the database), and until that wait ends after it, within ``DEADLINE``; gives the list its
    answer lands in."""
    ended: list[Job | None] = []
    with trio.fail_after(DEADLINE):  # a bound on a hang: only a notification ends it in time
        async with trio.open_nursery() as nursery:

            async def wait_on_b() -> None:
                ended.append(await (_watched(b, job_id) if watch else b.wait(job_id)))

            nursery.start_soon(wait_on_b)
            while not ended and not await trio.to_thread.run_sync(_waited, dsn, job_id):  # noqa: ASYNC110
                await trio.sleep(0.01)
            yield ended


@pytest.mark.parametrize("cancelled", [False, True], ids=["live", "cancelled in flight"])
async def test_a_wait_elsewhere_is_woken_when_the_jobs_runner_shuts_down(
    pg_dsn: str, cancelled: bool
) -> None:
    # Live, the shutdown fails the job; cancelled (its last fetch in flight within its grace),
    # it stops the drain, over once A unregisters. Either way B's wait is told.
    fetch = ScriptedFetch()
    started, _ = fetch.gate("https://example.test/gated")
    store_a, store_b = PostgresJobStore.open(pg_dsn), PostgresJobStore.open(pg_dsn)
    try:
        stop_a = trio.Event()

        async def run_a(task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
            async with open_runner(store_a, fetch, OWNER) as a:
                job_id, _ = await a.submit("alice", "user", urls("gated", "later"))
                await started.wait()
                task_status.started(job_id)
                await stop_a.wait()

        async with open_runner(store_b, ScriptedFetch(), WAITER) as b, trio.open_nursery() as n:
            job_id = await n.start(run_a)
            if cancelled:
                assert await b.cancel(job_id)
            async with _waiting(b, job_id, pg_dsn) as ended:
                stop_a.set()  # A shuts down while B waits
    finally:
        await store_a.aclose()
        await store_b.aclose()
    [job] = ended
    assert job is not None
    if cancelled:
        assert job.status is JobState.CANCELLED
    else:
        assert (job.status, job.error) == (JobState.FAILED, "shutdown")
    assert job.targets_done == 0


@pytest.mark.parametrize("cancelled", [False, True], ids=["live", "cancelled in flight"])
def test_a_wait_elsewhere_is_woken_when_the_jobs_runner_is_killed_and_reaped(
    spawn: Callable[..., Child], pg_dsn: str, tmp_path: Path, cancelled: bool
) -> None:
    # A is SIGKILLed mid-fetch; B reaps it once it has been silent for runner_timeout. Live,
    # the job is failed by the reap; cancelled, its drain is over with A: B's wait is told.
    a = spawn(poll_interval=POLL_NEVER, cancel_grace=POLL_NEVER)
    b = spawn(poll_interval=POLL_NEVER)
    job_id = a.call("submit", caller="alice", urls=_urls("k", "gate-g0", "gate-g1"))["job"]
    _until(lambda: (tmp_path / "g0.started").exists(), "target 0 to start")
    if cancelled:
        assert b.call("cancel", job=job_id) is True
    waiting = b.send("wait", job=job_id)
    _until(lambda: _waited(pg_dsn, job_id), "B's wait to be registered")
    os.kill(a.proc.pid, signal.SIGKILL)
    a.proc.wait()
    job = b.answer(waiting)["ok"]
    assert (job["status"], job["done"]) == ("cancelled" if cancelled else "failed", 0)


async def test_a_wait_elsewhere_is_woken_when_the_job_is_forgotten(pg_dsn: str) -> None:
    # Cancelled, its last fetch in flight on A: B's wait lasts until that drain stops, or
    # the job is forgotten (then it answers None).
    fetch = ScriptedFetch()
    started, _ = fetch.gate("https://example.test/gated")
    store_a, store_b = PostgresJobStore.open(pg_dsn), PostgresJobStore.open(pg_dsn)
    try:
        async with (
            open_runner(store_a, fetch, OWNER) as a,
            open_runner(store_b, ScriptedFetch(), WAITER) as b,
        ):
            job_id, _ = await a.submit("alice", "user", urls("gated", "later"))
            await started.wait()
            assert await b.cancel(job_id)
            async with _waiting(b, job_id, pg_dsn) as ended:
                assert await b.forget(job_id) is not None
    finally:
        await store_a.aclose()
        await store_b.aclose()
    assert ended == [None]


#: What a test does between B's read of the cancelled job and its question whether the drain
#: is over: given the job's id, A's store and the gate of A's fetch in flight.
Between = Callable[[str, PostgresJobStore, trio.Event], Awaitable[None]]


async def _answer_around(pg_dsn: str, watch: bool, between: Between) -> list[object]:
    """B's wait on (or watch of) A's job, cancelled with its first fetch in flight, with
    ``between`` run after the first read of B's that finds the job terminal."""
    fetch = ScriptedFetch()
    started, gate = fetch.gate("https://example.test/gated")
    store_a, store_b = PostgresJobStore.open(pg_dsn), PostgresJobStore.open(pg_dsn)
    name = "get_outcomes" if watch else "get_job"
    read, held = getattr(store_b, name), []

    async def read_then(job_id: str, *args: object, **kwargs: object) -> object:
        found = await read(job_id, *args, **kwargs)
        job = found[0] if isinstance(found, tuple) else found
        if not held and isinstance(job, Job) and job.is_terminal:
            held.append(job_id)
            await between(job_id, store_a, gate)
        return found

    try:
        async with (
            open_runner(store_a, fetch, OWNER) as a,
            open_runner(store_b, ScriptedFetch(), WAITER) as b,
        ):
            job_id, _ = await a.submit("alice", "user", urls("gated", "later"))
            await started.wait()
            assert await b.cancel(job_id)
            setattr(store_b, name, read_then)
            with trio.fail_after(DEADLINE):
                if watch:
                    items: list[object] = [item async for item in b.watch(job_id)]
                else:
                    items = [await b.wait(job_id)]
    finally:
        await store_a.aclose()
        await store_b.aclose()
    assert held == [job_id]
    return items


@pytest.mark.parametrize("watch", [False, True], ids=["wait", "watch"])
async def test_a_job_forgotten_between_the_waits_reads_answers_none(
    pg_dsn: str, watch: bool
) -> None:
    # The job is forgotten before B asks whether its drain is over: B answers that it is
    # gone, not the job it read before.
    async def forget(job_id: str, store_a: PostgresJobStore, gate: trio.Event) -> None:
        assert await store_a.forget_job(job_id, now=time.time()) is not None

    assert await _answer_around(pg_dsn, watch, forget) == ([] if watch else [None])


@pytest.mark.parametrize("watch", [False, True], ids=["wait", "watch"])
async def test_an_outcome_stored_between_the_waits_reads_is_in_its_answer(
    pg_dsn: str, watch: bool
) -> None:
    # A stores the outcome in flight and its drain stops before B asks whether it is over:
    # B's answer has that outcome.
    async def store_it(job_id: str, store_a: PostgresJobStore, gate: trio.Event) -> None:
        gate.set()
        query = "SELECT owner IS NULL FROM jobs WHERE id = %s"
        while not await trio.to_thread.run_sync(lambda: _sql(pg_dsn, query, (job_id,))[0][0]):  # noqa: ASYNC110
            await trio.sleep(0.01)

    *targets, ended = await _answer_around(pg_dsn, watch, store_it)
    assert isinstance(ended, Job) and ended.targets_done == 1
    assert [t.idx for t in targets] == ([0] if watch else [])  # type: ignore[attr-defined]


@pytest.mark.parametrize("watch", [False, True], ids=["wait", "watch"])
async def test_a_wait_elsewhere_ends_when_the_jobs_lease_lapses(pg_dsn: str, watch: bool) -> None:
    # Nobody tells of a lapse: B reads the job again when the lease it read runs out.
    fetch = ScriptedFetch()
    started, _ = fetch.gate("https://example.test/gated")
    store_a, store_b = PostgresJobStore.open(pg_dsn), PostgresJobStore.open(pg_dsn)
    try:
        async with (
            open_runner(store_a, fetch, Config(poll_interval=POLL_NEVER, ttl=2.0)) as a,
            open_runner(store_b, ScriptedFetch(), WAITER) as b,
        ):
            job_id, _ = await a.submit("alice", "user", urls("gated", "later"))
            await started.wait()
            async with _waiting(b, job_id, pg_dsn, watch=watch) as ended:
                pass
    finally:
        await store_a.aclose()
        await store_b.aclose()
    assert ended == [None]


def test_a_mark_after_the_shutdown_finds_the_drain_over(pg_dsn: str) -> None:
    # The shutdown fails and drops the runner's live jobs: a wait that read the job live
    # before, and asks to be told after, is answered that no outcome can follow (read it
    # again), not left waiting for a notification that went out before its mark.
    owner, watcher = PostgresStore.open(pg_dsn), PostgresStore.open(pg_dsn)
    try:
        owner.runner_id = owner.register_runner()
        caps = {"ttl": 60.0, "targets_per_job": 2, "jobs_per_caller": 2, "jobs_total": 2}
        job, _ = owner.create_job(NewJob("alice", "user", urls("a", "b"), **caps), now=T0)
        other, _ = owner.create_job(NewJob("alice", "user", urls("c", "d"), **caps), now=T0)
        assert watcher.watch_job(other.id)  # marked before: told by the shutdown
        with psycopg.connect(pg_dsn, autocommit=True) as listener:
            listener.execute("LISTEN trio_batch")
            assert owner.fail_own_jobs("shutdown", now=T0 + 1) == 2
            told = _notified(listener, pg_dsn)
        assert not watcher.watch_job(job.id)
        assert watcher.drain_over(job.id)
    finally:
        owner.close(final=True)
        watcher.close(final=True)
    assert told == [other.id]
