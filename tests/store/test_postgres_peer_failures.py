"""What other PostgreSQL job queues shipped as bugs, each tried here on a real server.

- a reap racing a late completion (River #1302): the job's last outcome commits while the
  reaper waits; the job ends ``done``, never ``failed`` over complete work;
- PostgreSQL killed in the middle of a reap (DBOS #716): once it is back, the reap completes
  and nothing is left live;
- a heartbeat row pruned early (procrastinate #1518, DBOS #804): the runner registers again
  under a new id, its old jobs are failed and fenced, and it carries on;
- the holder of the creation lock or the reaper's lock SIGSTOPped (procrastinate #1408,
  Oban #493): the server ends its transaction after ``store_timeout``, and the others go on.

Durations are printed as figures, never asserted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
import pytest
import trio

from trio_batch import JobState, OutcomeWrite, Result, StoreUnavailable
from trio_batch.store import NewJob, ReapedJob
from trio_batch.store.postgres import PostgresJobStore, PostgresStore
from trio_batch.store.postgres import _outcome_queries as wq
from trio_batch.store.postgres import _queries as q
from trio_batch.store.postgres._batch import OutcomeBatch

from ..runner.test_postgres_cluster import _sql, _until
from ..support.fakes import urls
from ..support.figures import Figures
from ..support.pg_server import PgServer

TTL, T0 = 3600.0, 1_000_000.0
CAPS = {"targets_per_job": 8, "jobs_per_caller": 4, "jobs_total": 16}


def _hold_job_row(dsn: str, job_id: str) -> psycopg.Connection[Any]:
    """A transaction holding ``job_id``'s row lock, as an outcome write in progress does."""
    conn = psycopg.connect(dsn)  # not autocommit: the lock lasts until commit
    conn.execute("SELECT 1 FROM jobs WHERE id = %s FOR NO KEY UPDATE", (job_id,))
    return conn


def _waiting_on_locks(dsn: str) -> int:
    rows = _sql(
        dsn,
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database()",
    )
    return int(rows[0][0])


def test_a_reap_racing_the_last_outcome_leaves_the_job_done(pg_dsn: str) -> None:
    a = PostgresStore.open(pg_dsn)
    b = PostgresStore.open(pg_dsn)
    try:
        a.runner_id = a.register_runner()
        job, _ = a.create_job(NewJob("alice", "user", urls("only"), ttl=TTL, **CAPS), now=T0)
        # A's last outcome is being written (its transaction holds the job's row) when A's
        # registration is found silent and B reaps.
        writer = psycopg.connect(pg_dsn)
        values = a._outcomes_params(
            OutcomeBatch.of([OutcomeWrite(job.id, 0, result=Result("x"))]).sent, ttl=TTL, now=T0
        )
        assert writer.execute(wq.RECORD_OUTCOMES_CALL, values).fetchone()[2]  # type: ignore[index]
        _sql(pg_dsn, "DELETE FROM runners WHERE id = %s", (a.runner_id,))
        reaped: list[list[ReapedJob]] = []
        reaper = threading.Thread(target=lambda: reaped.append(b.reap(30, now=T0 + 1)))
        reaper.start()
        _until(lambda: _waiting_on_locks(pg_dsn) >= 1, "the reap to wait on the job's row")
        writer.commit()  # the completion lands between the reaper's read and its write
        reaper.join()
        writer.close()
        assert reaped == [[]]
        final = b.get_job(job.id, now=T0 + 2)
        assert final is not None and (final.status, final.error) == (JobState.DONE, None)
    finally:
        a.close(final=True)
        b.close(final=True)


def test_postgresql_killed_mid_reap_the_reap_completes_once_it_is_back(
    pg_dsn: str, pg_server: PgServer
) -> None:
    a = PostgresStore.open(pg_dsn)
    b = PostgresStore.open(pg_dsn, store_timeout=5.0)
    try:
        a.runner_id = a.register_runner()
        jobs = [
            a.create_job(NewJob(f"c{i}", "user", urls(f"t{i}"), ttl=TTL, **CAPS), now=T0)[0]
            for i in range(3)
        ]
        _sql(pg_dsn, "DELETE FROM runners WHERE id = %s", (a.runner_id,))
        holder = _hold_job_row(pg_dsn, jobs[1].id)
        failed: list[BaseException] = []

        def reap() -> None:
            try:
                b.reap(30, now=T0 + 1)
            except StoreUnavailable as exc:  # the driver's error, typed
                failed.append(exc)

        reaper = threading.Thread(target=reap)
        reaper.start()
        _until(lambda: _waiting_on_locks(pg_dsn) >= 1, "the reap to be under way")
        # The test server runs with synchronous_commit off: flush what was committed before, so
        # the crash loses only what a crash on a durable server would (the reap under way).
        _sql(pg_dsn, "CHECKPOINT")
        pg_server.stop("immediate")  # killed mid-reap: nothing of it committed
        reaper.join()
        holder.close()
        pg_server.start()
        assert len(failed) == 1
        assert len(b.reap(30, now=T0 + 2)) == 3  # the next reap does it all
        states = _sql(
            pg_dsn,
            "SELECT status, error, owner FROM jobs WHERE id = ANY(%s)",
            ([j.id for j in jobs],),
        )
        assert states == [("failed", "restart", None)] * 3
        assert _sql(pg_dsn, "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')") == [
            (0,)
        ]
    finally:
        a.close(final=True)
        b.close(final=True)


async def test_a_heartbeat_row_pruned_early_fences_the_old_jobs_and_the_runner_goes_on(
    pg_dsn: str,
) -> None:
    async with (
        PostgresJobStore.open(pg_dsn) as a,
        PostgresJobStore.open(pg_dsn) as b,
        a.claim(heartbeat_interval=0.05, runner_timeout=60),
    ):
        if True:
            old_id = a.runner_id
            job, _ = await a.create_job(
                NewJob("alice", "user", urls("x", "y"), ttl=TTL, **CAPS), now=T0
            )
            _sql(pg_dsn, "DELETE FROM runners WHERE id = %s", (old_id,))  # pruned early
            while a.runner_id == old_id:  # noqa: ASYNC110 (the heartbeat thread re-registers)
                await trio.sleep(0.02)
            new_id = a.runner_id
            assert new_id != old_id  # a fresh id, never the old one reused
            # The old job is no registered runner's: reaped, and A's late write into it refused.
            # Reaped by B, or by A's own next heartbeat (one reaper at a time: B may find the
            # reaper's lock taken and reap nothing).
            while (await b.get_job(job.id, now=T0 + 1)).status.is_live:  # type: ignore[union-attr]
                await b.reap_orphans(now=T0 + 1)
                await trio.sleep(0.02)
            reaped = await b.get_job(job.id, now=T0 + 1)
            assert reaped is not None and (reaped.status, reaped.error) == (
                JobState.FAILED,
                "restart",
            )
            late = await a.record_outcome(
                OutcomeWrite(job.id, 0, result=Result("late")), ttl=TTL, now=T0 + 2
            )
            assert late is None
            status = await b.get_status(job.id, now=T0 + 3)
            assert status is not None and status[0].status is JobState.FAILED
            assert [t.status.value for t in status[1]] == ["pending", "pending"]
            # A goes on, under its new id.
            fresh, _ = await a.create_job(
                NewJob("bob", "user", urls("z"), ttl=TTL, **CAPS), now=T0 + 4
            )
            assert _sql(pg_dsn, "SELECT owner FROM jobs WHERE id = %s", (fresh.id,)) == [(new_id,)]


#: A process that takes one of trio_batch's advisory locks in a store transaction (with its
#: store_timeout's idle_in_transaction_session_timeout), says so, and sleeps: the test stops it.
_HOLDER = """
import sys, time
from trio_batch.store.postgres import PostgresStore
from trio_batch.store.postgres._connection import Op
from trio_batch.store.postgres import _queries as q
store = PostgresStore.open(sys.argv[1], store_timeout=float(sys.argv[3]))
def hold(conn):
    with store._tx(conn, Op.WRITE):
        conn.execute(q.XACT_LOCK, (q.LOCK_CLASS, int(sys.argv[2])))
        print("locked", flush=True)
        time.sleep(3600)
store._run(hold)
"""


@pytest.mark.parametrize("lock", ["create", "reap"])
def test_a_sigstopped_holder_of_a_lock_holds_the_others_up_only_for_store_timeout(
    pg_dsn: str, lock: str, figures: Figures
) -> None:
    timeout = 1.0
    which = q.LOCK_CREATE if lock == "create" else q.LOCK_REAP
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, pg_dsn, str(which), str(timeout)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    store = PostgresStore.open(pg_dsn, store_timeout=timeout)
    try:
        # A job of no runner: the next reap that gets the reaper's lock fails it.
        store.create_job(NewJob("orphan", "user", urls("o"), ttl=TTL, **CAPS), now=T0)
        store.runner_id = store.register_runner()
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        holder.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        refused = 0
        while True:
            try:
                if lock == "create":
                    store.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **CAPS), now=T0)
                    break
                if len(store.reap(30, now=T0)) == 1:  # none while another holds the reaper's lock
                    break
                refused += 1
            except (psycopg.Error, StoreUnavailable):
                refused += 1
            time.sleep(0.05)
        went_on = time.monotonic() - stopped
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait()
        store.close(final=True)
    figures.add(
        f"postgres: with the {lock} lock's holder SIGSTOPped, the others went on after "
        f"{went_on:.2f} s ({refused} calls refused meanwhile; store_timeout {timeout:g} s)"
    )
