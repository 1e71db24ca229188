"""Runners wake each other with LISTEN/NOTIFY: a cancel, wait or watch across runners reacts at
once, not at the next poll.

The runners here poll every ``POLL_NEVER`` seconds, twice as long as any wait of these tests may
last (``DEADLINE``, after which it fails): whatever they react to in time, they learnt of from a
notification. With LISTEN off (``?listen=off``, as behind PgBouncer) the same works by the poll.
Latencies are measured and printed as figures, never asserted.
"""

from __future__ import annotations

import functools
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from trio_batch import Config, Job, JobState, OutcomeWrite, Result, open_runner, open_store
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresJobStore, PostgresStore
from trio_batch.store.postgres import _outcome_queries as wq
from trio_batch.store.postgres import _queries as q
from trio_batch.store.postgres._batch import OutcomeBatch
from trio_batch.store.postgres._listen import (
    PROBE_PREFIX,
    listen_for_changes,
    split_listen_option,
)

from ..runner import test_postgres_cluster as cluster
from ..runner.test_postgres_cluster import DEADLINE, Child, _outcomes, _sql, _until, _urls
from ..support.cuttable_proxy import CuttableProxy
from ..support.fakes import T0, ScriptedFetch, urls
from ..support.figures import Figures
from ..support.markers import PGBOUNCER
from ..support.pg_server import through

#: Runner processes on the test's database: the multi-runner tests' fixture.
spawn = cluster.spawn

#: A poll so rare that no test here could see its effect before its deadline.
POLL_NEVER = 2 * DEADLINE
#: The application name of a runner's listening connection, as the server lists it.
LISTENER = "trio_batch listen"


def _listeners(dsn: str) -> int:
    """How many runners' listening connections the test's database has."""
    rows = _sql(
        dsn,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = %s AND datname = current_database()",
        (LISTENER,),
    )
    return int(rows[0][0])


def _with_listen(dsn: str, value: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    query = "&".join(filter(None, [parts.query, f"listen={value}"]))
    return urllib.parse.urlunsplit(parts._replace(query=query))


def _cancel_in_flight(a: Child, b: Child, dsn: str, gates: Path) -> tuple[float, float]:
    """B cancels A's job while its first target is in flight; seconds until A learnt of it,
    and until B's wait returned once the target is let go. Checks the outcomes."""
    job_id = a.call("submit", caller="alice", urls=_urls("n", "gate-g0", "gate-g1"))["job"]
    _until(lambda: (gates / "g0.started").exists(), "target 0 to start")
    waiting = b.send("wait", job=job_id)
    assert b.call("cancel", job=job_id) is True
    cancelled = time.monotonic()
    a.wait_log("job cancelled through another runner", job_id)
    learnt = time.monotonic() - cancelled
    # A learnt of it while target 0 was still in flight (not from that target's write).
    assert [o[1] for o in _outcomes(dsn, job_id)] == ["pending", "pending"]
    (gates / "g0").touch()
    released = time.monotonic()
    assert b.answer(waiting)["ok"]["status"] == "cancelled"
    ended = time.monotonic() - released
    # The target in flight was stored; the next one never started.
    assert [o[1] for o in _outcomes(dsn, job_id)] == ["done", "pending"]
    assert not (gates / "g1.started").exists()
    assert job_id not in a.call("drains")
    return learnt, ended


def test_a_cancel_through_another_runner_reaches_the_fetch_in_flight_by_notification(
    spawn: Callable[..., Child], pg_dsn: str, tmp_path: Path, figures: Figures
) -> None:
    a, b = spawn(poll_interval=POLL_NEVER), spawn(poll_interval=POLL_NEVER)
    _until(lambda: _listeners(pg_dsn) == 2, "both runners to listen")
    learnt, ended = _cancel_in_flight(a, b, pg_dsn, tmp_path)
    figures.add(
        f"postgres LISTEN: cancel through B seen by A after {learnt * 1000:.0f} ms; B's wait "
        f"ended {ended * 1000:.0f} ms after A's fetch returned (poll_interval {POLL_NEVER:g} s)"
    )


def test_a_cancel_through_another_runner_honours_cancel_grace_by_notification(
    spawn: Callable[..., Child], pg_dsn: str, tmp_path: Path, figures: Figures
) -> None:
    grace = 0.3
    a = spawn(poll_interval=POLL_NEVER, cancel_grace=grace)
    b = spawn(poll_interval=POLL_NEVER)
    job_id = a.call("submit", caller="alice", urls=_urls("x", "gate-never", "sleep-0"))["job"]
    _until(lambda: (tmp_path / "never.started").exists(), "target 0 to start")
    waiting = b.send("wait", job=job_id)
    assert b.call("cancel", job=job_id) is True
    cancelled = time.monotonic()
    assert b.answer(waiting)["ok"]["status"] == "cancelled"
    stopped = time.monotonic() - cancelled
    outcomes = _outcomes(pg_dsn, job_id)
    assert [(o[1], o[3]) for o in outcomes] == [("failed", "cancelled"), ("pending", None)]
    figures.add(
        f"postgres LISTEN: cancel through B to A's drain stopped (B's wait returned) "
        f"{stopped * 1000:.0f} ms, cancel_grace {grace * 1000:.0f} ms included"
    )


def test_wait_and_watch_on_another_runner_end_when_its_job_finishes_by_notification(
    spawn: Callable[..., Child], pg_dsn: str, tmp_path: Path, figures: Figures
) -> None:
    a, b = spawn(poll_interval=POLL_NEVER), spawn(poll_interval=POLL_NEVER)
    job_id = a.call("submit", caller="alice", urls=_urls("w", "sleep-0", "gate-end"))["job"]
    _until(lambda: (tmp_path / "end.started").exists(), "the last target to start")
    waiting, watching = b.send("wait", job=job_id), b.send("watch", job=job_id)
    _until(lambda: b.call("waiting", job=job_id) == 2, "B's wait and watch to be under way")
    # B's store calls run in order on one connection: once this read is answered, the first
    # reads of the wait and the watch are done, and saw the job running.
    assert b.call("status", job=job_id)["status"] == "running"
    # And B asked A to notify the job's end (a wait that missed it would read it again).
    _until(lambda: _waited(pg_dsn, job_id), "B's wait to be registered")
    (tmp_path / "end").touch()
    released = time.monotonic()
    finished = b.answer(waiting)["ok"]
    ended = time.monotonic() - released
    assert (finished["status"], finished["done"]) == ("done", 2)
    items = b.answer(watching)["ok"]
    assert items[:-1] == [{"idx": 0, "status": "done"}, {"idx": 1, "status": "done"}]
    assert items[-1]["status"] == "done"
    figures.add(
        f"postgres LISTEN: B's wait on A's job ended {ended * 1000:.0f} ms after A's last "
        f"fetch returned (poll_interval {POLL_NEVER:g} s)"
    )


def test_a_listener_whose_connection_is_cut_reconnects_and_misses_nothing(
    spawn: Callable[..., Child], pg_dsn: str, tmp_path: Path
) -> None:
    a, b = spawn(poll_interval=POLL_NEVER), spawn(poll_interval=POLL_NEVER)
    _until(lambda: _listeners(pg_dsn) == 2, "both runners to listen")
    job_id = a.call("submit", caller="alice", urls=_urls("r", "gate-g0", "gate-g1"))["job"]
    _until(lambda: (tmp_path / "g0.started").exists(), "target 0 to start")
    # Cut every listening connection; the cancel's notification may reach nobody.
    _sql(
        pg_dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = %s AND datname = current_database()",
        (LISTENER,),
    )
    assert b.call("cancel", job=job_id) is True
    # A reconnects and reads again what it may have missed, long before its poll.
    a.wait_log("job cancelled through another runner", job_id)
    assert any(m["log"].startswith("lost the connection listening") for m in a.logs)
    _until(lambda: _listeners(pg_dsn) == 2, "both runners to listen again")
    (tmp_path / "g0").touch()
    assert b.call("wait", job=job_id)["status"] == "cancelled"
    assert [o[1] for o in _outcomes(pg_dsn, job_id)] == ["done", "pending"]
    assert not (tmp_path / "g1.started").exists()


def test_with_listen_off_a_cancel_and_a_wait_across_runners_work_by_polling(
    spawn: Callable[..., Child], pg_dsn: str, tmp_path: Path, figures: Figures
) -> None:
    poll = 1.0
    url = _with_listen(pg_dsn, "off")
    a, b = spawn(url, poll_interval=poll), spawn(url, poll_interval=poll)
    learnt, ended = _cancel_in_flight(a, b, pg_dsn, tmp_path)
    assert _listeners(pg_dsn) == 0  # no LISTEN connection: usable behind PgBouncer
    figures.add(
        f"postgres listen=off: cancel through B seen by A after {learnt * 1000:.0f} ms; B's "
        f"wait ended {ended * 1000:.0f} ms after A's fetch returned (poll_interval {poll:g} s)"
    )


def _notified(listener: psycopg.Connection[Any], dsn: str) -> list[str]:
    """The job ids notified on the channel until now (the listener's probes left out): a
    notification of the test's own is sent last, and the channel's are delivered in the order
    of their commits."""
    _sql(dsn, "NOTIFY trio_batch, 'end'")
    payloads = []
    for notification in listener.notifies(timeout=DEADLINE):
        if notification.payload == "end":
            return payloads
        # Left out: the listeners' own checks, and the runners gone (each runner's shutdown).
        if not notification.payload.startswith((PROBE_PREFIX, q.RUNNER_GONE)):
            payloads.append(notification.payload)
    raise AssertionError(f"the test's own notification did not come back; got {payloads}")


def _waited(dsn: str, job_id: str) -> bool:
    """Whether a runner registered a wait on the job (schema v12)."""
    return bool(_sql(dsn, "SELECT waited FROM jobs WHERE id = %s", (job_id,))[0][0])


@pytest.mark.parametrize(
    "pooled", [False, pytest.param(True, marks=PGBOUNCER)], ids=["direct", "through PgBouncer"]
)
@pytest.mark.parametrize("marked_first", [True, False], ids=["marked first", "ended first"])
def test_a_wait_marked_beside_the_last_outcome_is_told_or_finds_the_job_ended(
    request: pytest.FixtureRequest, pg_dsn: str, pooled: bool, marked_first: bool
) -> None:
    # The mark and the end each lock the job's row: whichever comes second sees the other.
    # Marked first: the end is notified. Ended first (its transaction still open): the mark
    # waits for its lock, then answers that the job is no longer live, and nothing is told.
    dsn = str(request.getfixturevalue("pooled_dsn")) if pooled else pg_dsn
    listener = psycopg.connect(pg_dsn, autocommit=True)
    listener.execute("LISTEN trio_batch")
    store, watcher = PostgresStore.open(dsn), PostgresStore.open(pg_dsn)
    answers: list[bool] = []
    try:
        caps = {"ttl": 60.0, "targets_per_job": 1, "jobs_per_caller": 1, "jobs_total": 1}
        job, _ = store.create_job(NewJob("alice", "user", urls("only"), **caps), now=T0)
        write = OutcomeWrite(job.id, 0, result=Result("x"))
        values = store._outcomes_params(OutcomeBatch.of([write]).sent, ttl=60.0, now=T0 + 1)
        with psycopg.connect(dsn) as ending:  # one transaction, committed at the block's end
            if marked_first:
                assert watcher.watch_job(job.id)
            ended = ending.execute(wq.RECORD_OUTCOMES_CALL, values).fetchone()
            assert ended is not None and ended[2]  # stored: the job's last outcome
            if not marked_first:
                mark = threading.Thread(target=lambda: answers.append(watcher.watch_job(job.id)))
                mark.start()
                waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted"
                _until(lambda: _sql(pg_dsn, waiting) != [(0,)], "the mark to wait for the lock")
        if not marked_first:
            mark.join()
        notified = _notified(listener, pg_dsn)
    finally:
        store.close(final=True)
        watcher.close(final=True)
        listener.close()
    assert (notified, answers) == (([job.id], []) if marked_first else ([], [False]))


def test_a_job_marked_already_is_not_written_again_by_another_wait(pg_dsn: str) -> None:
    # Many waits on one job (say, HTTP clients) would each lock and rewrite the row its drain
    # bumps at every outcome; the first mark writes it, the others read it.
    store = PostgresStore.open(pg_dsn)
    version = "SELECT xmin::text, waited FROM jobs WHERE id = %s"
    try:
        caps = {"ttl": 60.0, "targets_per_job": 1, "jobs_per_caller": 1, "jobs_total": 1}
        job, _ = store.create_job(NewJob("alice", "user", urls("only"), **caps), now=T0)
        assert store.watch_job(job.id)
        [(marked, waited)] = _sql(pg_dsn, version, (job.id,))
        assert waited
        assert store.watch_job(job.id)
        assert _sql(pg_dsn, version, (job.id,)) == [(marked, True)]
        write = OutcomeWrite(job.id, 0, result=Result("x"))
        [ended] = store.record_outcomes([write], ttl=60.0, now=T0 + 1)
        assert isinstance(ended, Job) and ended.status is JobState.DONE
        assert not store.watch_job(job.id)  # every outcome stored: read it again
        assert not store.watch_job("unknown")
    finally:
        store.close(final=True)


async def test_a_finished_job_is_notified_once_if_another_runner_waits_on_it(
    pg_dsn: str,
) -> None:
    # Six outcomes and no waiter elsewhere: no notification. A job another runner waits on:
    # one, its end. The cancel: one, waited on or not (its drain must learn of it); the
    # release that follows, waited on by nobody: none.
    listener = psycopg.connect(pg_dsn, autocommit=True)
    listener.execute("LISTEN trio_batch")
    fetch = ScriptedFetch()
    started, release = fetch.gate("https://example.test/gated")
    held, let_go = fetch.gate("https://example.test/held")
    store, other = PostgresJobStore.open(pg_dsn), PostgresJobStore.open(pg_dsn)
    try:
        async with open_runner(store, fetch, Config(jobs_per_caller=3)) as runner:
            alone, _ = await runner.submit("alice", "user", urls(*[f"t{i}" for i in range(6)]))
            finished = await runner.wait(alone)
            assert finished is not None and finished.status is JobState.DONE
            watched, _ = await runner.submit("alice", "user", urls("first", "gated", "last"))
            await started.wait()
            assert await other.watch_job(watched)  # as a wait on another runner does
            release.set()
            finished = await runner.wait(watched)
            assert finished is not None and finished.status is JobState.DONE
            assert not await other.watch_job(watched)  # ended: read it again
            cancelled, _ = await runner.submit("alice", "user", urls("held", "later"))
            await held.wait()
            assert await runner.cancel(cancelled)
            let_go.set()
            stopped = await runner.wait(cancelled)
            assert stopped is not None and stopped.status is JobState.CANCELLED
        payloads = await trio.to_thread.run_sync(_notified, listener, pg_dsn)
    finally:
        await store.aclose()
        await other.aclose()
        listener.close()
    assert payloads == [watched, cancelled]
    assert not _waited(pg_dsn, alone) and _waited(pg_dsn, watched)


async def test_while_a_runner_of_an_older_version_is_registered_every_end_is_notified(
    pg_dsn: str,
) -> None:
    # A runner started before the upgrade to v12 registered as v11 did, never registers its
    # waits, and waits on the notification of every job's end, which it still gets.
    listener = psycopg.connect(pg_dsn, autocommit=True)
    listener.execute("LISTEN trio_batch")
    store = PostgresJobStore.open(pg_dsn)
    old_registration = "INSERT INTO runners (id, host, pid) VALUES (%s, %s, %s)"  # v11's
    try:
        async with open_runner(store, ScriptedFetch(), Config()) as runner:
            await trio.to_thread.run_sync(_sql, pg_dsn, old_registration, ("old", "h", 1))
            told, _ = await runner.submit("alice", "user", urls("a", "b"))
            assert (await runner.wait(told)) is not None
            # The older runner stops (or is reaped): its registration goes.
            await trio.to_thread.run_sync(_sql, pg_dsn, "DELETE FROM runners WHERE id = 'old'")
            untold, _ = await runner.submit("alice", "user", urls("c", "d"))
            assert (await runner.wait(untold)) is not None
        payloads = await trio.to_thread.run_sync(_notified, listener, pg_dsn)
    finally:
        await store.aclose()
        listener.close()
    assert payloads == [told]


async def test_a_wait_on_another_runners_job_is_woken_by_its_end_not_the_poll(
    pg_dsn: str,
) -> None:
    # Both runners poll once an hour: only A's notification of the job's end can end B's
    # wait before the deadline.
    fetch = ScriptedFetch()
    started, release = fetch.gate("https://example.test/gated")
    config = Config(poll_interval=3600.0)
    store_a, store_b = PostgresJobStore.open(pg_dsn), PostgresJobStore.open(pg_dsn)
    ended: list[Job | None] = []
    try:
        async with (
            open_runner(store_a, fetch, config) as a,
            open_runner(store_b, ScriptedFetch(), config) as b,
        ):
            job_id, _ = await a.submit("alice", "user", urls("first", "gated"))
            await started.wait()
            with trio.fail_after(DEADLINE):
                async with trio.open_nursery() as nursery:

                    async def wait_on_b() -> None:
                        ended.append(await b.wait(job_id))

                    nursery.start_soon(wait_on_b)
                    # B's first read saw the job live: a row in the database, no event.
                    while not await trio.to_thread.run_sync(_waited, pg_dsn, job_id):  # noqa: ASYNC110
                        await trio.sleep(0.01)
                    release.set()
    finally:
        await store_a.aclose()
        await store_b.aclose()
    [job] = ended
    assert job is not None and (job.status, job.targets_done) == (JobState.DONE, 2)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u@h/db?listen=off", ("postgresql://u@h/db", False)),
        (
            "postgres://u@/db?host=/run/pg&listen=no&sslmode=disable",
            ("postgres://u@/db?host=/run/pg&sslmode=disable", False),
        ),
        ("postgresql://u@h/db?listen=ON", ("postgresql://u@h/db", True)),
        ("postgresql://u@h/db?host=/tmp", ("postgresql://u@h/db?host=/tmp", None)),
        ("host=/tmp dbname=db", ("host=/tmp dbname=db", None)),
    ],
)
def test_the_listen_url_option_is_taken_out_of_the_url(
    url: str, expected: tuple[str, bool | None]
) -> None:
    assert split_listen_option(url) == expected


def test_a_bad_listen_value_is_refused_with_the_values_it_takes(pg_dsn: str) -> None:
    with pytest.raises(ValueError, match=r"listen='maybe'.*listen=off"):
        open_store(_with_listen(pg_dsn, "maybe"))


async def test_a_store_opened_with_listen_off_does_not_listen(pg_dsn: str) -> None:
    async with open_store(_with_listen(pg_dsn, "off")) as store:
        assert isinstance(store, PostgresJobStore) and store.listen is False
        # Returns at once instead of listening until cancelled.
        await store.listen_changes(lambda _: None)
    async with open_store(pg_dsn) as store:
        assert isinstance(store, PostgresJobStore) and store.listen is True


async def test_a_listen_held_by_a_partition_gives_up_at_store_timeout_and_retries(
    pg_dsn: str,
    pg_proxy: CuttableProxy,
    mock_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Connected, the listener sends LISTEN: a partition from that moment held it for good
    (on a worker thread: the listener could not even be cancelled). Now the statement is
    bounded by store_timeout (mock time here): the connection is dropped, the failure logged,
    and the listener tries again after its backoff."""
    timeout = 20.0
    url = through(pg_proxy, pg_dsn)
    async with trio.open_nursery() as nursery:
        pg_proxy.hold_on(b"LISTEN ")
        nursery.start_soon(
            functools.partial(
                listen_for_changes,
                url,
                lambda _: None,
                connect_timeout=timeout,
                store_timeout=timeout,
            )
        )
        assert await trio.to_thread.run_sync(pg_proxy.held.wait, 30.0)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(timeout)
        await trio.testing.wait_all_tasks_blocked()
        gave_up = [r.getMessage() for r in caplog.records if "could not listen" in r.getMessage()]
        pg_proxy.release()  # before the fix: lets the held LISTEN end, so the test can
        nursery.cancel_scope.cancel()
    assert len(gave_up) == 1, gave_up
    assert "store_timeout" in gave_up[0]


async def test_a_wait_begun_after_a_cancel_is_woken_by_the_last_outcome_in_flight(
    pg_dsn: str,
) -> None:
    # B cancels A's job while its last target is in flight, then waits on it: the job is
    # terminal already, but A's drain is not over until that outcome is stored, which ends
    # the drain without a release. Both poll once an hour: only a notification of that
    # outcome can end B's wait before the deadline.
    fetch = ScriptedFetch()
    started, release = fetch.gate("https://example.test/gated")
    config = Config(poll_interval=3600.0)
    store_a, store_b = PostgresJobStore.open(pg_dsn), PostgresJobStore.open(pg_dsn)
    ended: list[Job | None] = []
    try:
        async with (
            open_runner(store_a, fetch, config) as a,
            open_runner(store_b, ScriptedFetch(), config) as b,
        ):
            job_id, _ = await a.submit("alice", "user", urls("first", "gated"))
            await started.wait()
            assert await b.cancel(job_id)
            with trio.fail_after(DEADLINE):
                async with trio.open_nursery() as nursery:

                    async def wait_on_b() -> None:
                        ended.append(await b.wait(job_id))

                    nursery.start_soon(wait_on_b)
                    while job_id not in b._elsewhere._jobs:  # noqa: ASYNC110
                        await trio.sleep(0.01)
                    # B's store calls run in order: once this one is answered, the wait's
                    # first read is done, and saw the job cancelled, its drain not over.
                    status = await b.status(job_id)
                    assert status is not None and status[0].status is JobState.CANCELLED
                    release.set()
    finally:
        await store_a.aclose()
        await store_b.aclose()
    [job] = ended
    assert job is not None and (job.status, job.targets_done) == (JobState.CANCELLED, 2)
