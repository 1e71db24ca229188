"""The live jobs the caps and ``/metrics`` count, read from ``live_jobs`` (kept by triggers on
``jobs``), not from ``jobs`` itself: a transaction held open keeps every version of every job
ended since it began, and counting ``jobs`` stepped over them all at each submit."""

from __future__ import annotations

from typing import Any

import psycopg

from trio_batch import JobState, OutcomeWrite, Result
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresStore
from trio_batch.store.postgres import _queries as q

from ..support.fakes import urls

TTL, T0 = 3600.0, 1_000_000.0
CAPS = {"targets_per_job": 8, "jobs_per_caller": 8, "jobs_total": 64}

_LIVE_IN_JOBS = "SELECT id FROM jobs WHERE status IN ('queued', 'running') ORDER BY id"
_LIVE_JOBS = "SELECT job_id FROM live_jobs ORDER BY job_id"


def _sql(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def _agree(dsn: str) -> list[str]:
    """The live jobs, after checking that ``live_jobs`` holds exactly those of ``jobs``."""
    live = [row[0] for row in _sql(dsn, _LIVE_IN_JOBS)]
    assert [row[0] for row in _sql(dsn, _LIVE_JOBS)] == live
    return live


def _new(store: PostgresStore, caller: str, *names: str, ttl: float = TTL) -> str:
    job, _ = store.create_job(NewJob(caller, "user", urls(*names), ttl=ttl, **CAPS), now=T0)
    return job.id


def test_live_jobs_follow_every_way_a_job_starts_and_ends(pg_dsn: str) -> None:
    store = PostgresStore.open(pg_dsn)
    other = PostgresStore.open(pg_dsn)
    try:
        store.runner_id = store.register_runner()
        other.runner_id = other.register_runner()
        done = _new(store, "a", "x", "y")
        cancelled = _new(store, "b", "x")
        _new(store, "c", "x")
        orphan = _new(other, "d", "x")
        lapsed = _new(store, "e", "x", ttl=1.0)
        kept = _new(store, "f", "x")
        assert len(_agree(pg_dsn)) == 6
        # Its last outcome ends a job; the first leaves it live.
        store.record_outcomes([OutcomeWrite(done, 0, result=Result("r"))], ttl=TTL, now=T0)
        assert done in _agree(pg_dsn)
        store.record_outcomes([OutcomeWrite(done, 1, result=Result("r"))], ttl=TTL, now=T0)
        assert done not in _agree(pg_dsn)
        # A cancel, a shutdown's failing of its own jobs (then new ones again).
        assert store.finish_job(cancelled, JobState.CANCELLED, now=T0) is not None
        assert cancelled not in _agree(pg_dsn)
        assert store.fail_own_jobs("shutdown", now=T0) == 3  # failed, lapsed, kept
        assert _agree(pg_dsn) == [orphan]
        kept = _new(store, "f", "again")
        lapsed = _new(store, "e", "again", ttl=1.0)
        # A runner gone: its jobs reaped.
        other.unregister_runner(other.runner_id)
        assert [job.job_id for job in store.reap(30.0, now=T0)] == [orphan]
        assert sorted(_agree(pg_dsn)) == sorted([kept, lapsed])
        # A live job whose lease lapsed, purged (with the first one of its caller, failed).
        assert store.purge_expired(now=T0 + 2.0, batch_size=10) == 2
        assert _agree(pg_dsn) == [kept]
        # A terminal job forgotten, and a live one deleted by hand.
        assert store.forget_job(done, now=T0) is not None
        _sql(pg_dsn, "DELETE FROM jobs WHERE id = %s", (kept,))
        assert _agree(pg_dsn) == []
    finally:
        store.close(final=True)
        other.close(final=True)


def test_the_caps_count_live_jobs_without_reading_jobs(pg_dsn: str) -> None:
    # A held transaction keeps every version of the jobs ended since it began: the submit's
    # counts must not step over them. ADMISSION reads jobs once, for the job to reuse (by its
    # key); the counts read live_jobs.
    store = PostgresStore.open(pg_dsn)
    holder = psycopg.connect(pg_dsn)
    try:
        holder.execute("SELECT txid_current()")  # holds the xmin until rolled back
        for n in range(20):
            job = _new(store, f"c{n % 4}", f"t{n}")
            store.record_outcomes([OutcomeWrite(job, 0, result=Result("r"))], ttl=TTL, now=T0)
        live = _new(store, "c0", "live")
        scans = (
            "SELECT relname, coalesce(seq_scan, 0) + coalesce(idx_scan, 0) "
            "FROM pg_stat_xact_user_tables WHERE relname IN ('jobs', 'live_jobs') ORDER BY 1"
        )
        with psycopg.connect(pg_dsn) as conn:
            before = dict(conn.execute(scans).fetchall())
            row = conn.execute(q.ADMISSION, {"caller": "c0", "key": "k", "now": T0}).fetchone()
            after = dict(conn.execute(scans).fetchall())
        assert row is not None and row[q.ADMISSION_JOB_COLUMNS :] == (1, 1, live)
        read = {name: after.get(name, 0) - before.get(name, 0) for name in ("jobs", "live_jobs")}
        assert read == {"jobs": 1, "live_jobs": 3}
    finally:
        holder.rollback()
        holder.close()
        store.close(final=True)
