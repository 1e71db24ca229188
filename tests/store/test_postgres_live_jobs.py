"""The live jobs the caps and ``/metrics`` count, read from ``live_jobs`` (kept by triggers on
``jobs``), not from ``jobs`` itself: a transaction held open keeps every version of every job
ended since it began, and counting ``jobs`` stepped over them all at each submit."""

from __future__ import annotations

from typing import Any

import psycopg

from trio_batch import Job, JobState, OutcomeWrite, Result
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresStore
from trio_batch.store.postgres import _queries as q

from ..support.fakes import urls
from ..support.pg_versions import back_to_v14

TTL, T0 = 3600.0, 1_000_000.0
CAPS = {"targets_per_job": 8, "jobs_per_caller": 8, "jobs_total": 64}

_LIVE_IN_JOBS = "SELECT id FROM jobs WHERE status IN ('queued', 'running') ORDER BY id"
_LIVE_JOBS = "SELECT job_id FROM live_jobs ORDER BY job_id"
_LIVE_PROGRESS = "SELECT job_id FROM live_progress ORDER BY job_id"


def _sql(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def _agree(dsn: str) -> list[str]:
    """The live jobs, after checking that ``live_jobs`` and ``live_progress`` hold exactly
    those of ``jobs``."""
    live = [row[0] for row in _sql(dsn, _LIVE_IN_JOBS)]
    assert [row[0] for row in _sql(dsn, _LIVE_JOBS)] == live
    assert [row[0] for row in _sql(dsn, _LIVE_PROGRESS)] == live
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


def _progress(dsn: str, job_id: str) -> list[tuple[Any, ...]]:
    """The job's progress row (none once it ended)."""
    columns = ", ".join(q.PROGRESS)
    return _sql(dsn, f"SELECT {columns} FROM live_progress WHERE job_id = %s", (job_id,))


def test_a_version_14_database_keeps_its_live_jobs_progress(pg_dsn: str) -> None:
    # Up to version 14 every outcome wrote a live job's counts and lease into its jobs row;
    # from 15 its live row holds them. The upgrade copies them over, and a runner still of
    # version 14 (a rolling upgrade) that writes them into the jobs row has them copied too.
    store = PostgresStore.open(pg_dsn)
    try:
        drained = _new(store, "a", "x", "y", "z")
        idle = _new(store, "b", "x")
        store.record_outcomes([OutcomeWrite(drained, 0, error="e")], ttl=TTL, now=T0 + 1)
    finally:
        store.close()
    back_to_v14(pg_dsn)
    store = PostgresStore.open(pg_dsn)
    try:
        assert _progress(pg_dsn, drained) == [(1, 1, 0, T0 + 1, T0 + 1 + TTL)]
        assert _progress(pg_dsn, idle) == [(0, 0, 0, T0, T0 + TTL)]
        # Version 14's outcome, as its statement bumped the job row.
        _sql(
            pg_dsn,
            "UPDATE jobs SET targets_done = targets_done + 1, results_size = results_size + 2, "
            "updated_at = %s, expires_at = %s WHERE id = %s",
            (T0 + 2, T0 + 2 + TTL, drained),
        )
        _sql(pg_dsn, "UPDATE targets SET status = 'done' WHERE job_id = %s AND idx = 1", (drained,))
        assert _progress(pg_dsn, drained) == [(2, 1, 2, T0 + 2, T0 + 2 + TTL)]
        job = store.get_job(drained, now=T0 + 3)
        assert job is not None and (job.targets_done, job.targets_failed) == (2, 1)
        assert (job.updated_at, job.expires_at) == (T0 + 2, T0 + 2 + TTL)
        # Its last outcome, by this version, ends it with every count.
        [ended] = store.record_outcomes(
            [OutcomeWrite(drained, 2, result=Result("r"))], ttl=TTL, now=T0 + 3
        )
        assert isinstance(ended, Job) and ended.status is JobState.PARTIAL
        assert (ended.targets_done, ended.targets_failed, ended.expires_at) == (3, 1, T0 + 3 + TTL)
        assert _progress(pg_dsn, drained) == []
        assert store.get_job(drained, now=T0 + 4) == ended
        # A cancel writes no lease: the live row's is kept.
        cancelled = store.finish_job(idle, JobState.CANCELLED, now=T0 + 5)
        assert cancelled is not None and cancelled.expires_at == T0 + TTL
        assert _progress(pg_dsn, idle) == []
    finally:
        store.close()


def test_a_live_jobs_progress_is_read_from_its_live_row(pg_dsn: str) -> None:
    # Each read of a live job (its status, the lists, the counts, the lapse) takes its counts
    # and lease from its live row; once the job ends, from its own row.
    store = PostgresStore.open(pg_dsn)
    try:
        store.runner_id = store.register_runner()
        job_id = _new(store, "a", "x", "y", ttl=10.0)
        store.record_outcomes([OutcomeWrite(job_id, 0, error="e")], ttl=TTL, now=T0 + 1)
        assert _sql(pg_dsn, "SELECT targets_done, expires_at FROM jobs") == [(0, T0 + 10.0)]
        later = T0 + 100.0  # past the lease the job was made with; within the bumped one
        job = store.get_job(job_id, now=later)
        assert job is not None and (job.targets_done, job.targets_failed) == (1, 1)
        assert job.expires_at == T0 + 1 + TTL
        assert [j.id for j in store.list_jobs(now=later)] == [job_id]
        assert [j.targets_done for j in store.list_caller_jobs("a", now=later, limit=5)] == [1]
        counts = store.counts(now=later)
        assert (counts.jobs["queued"], counts.targets_done, counts.targets_failed) == (1, 1, 1)
        assert store.purge_expired(now=later, batch_size=10) == 0
        assert store.purge_expired(now=T0 + 2 + TTL, batch_size=10) == 1
    finally:
        store.close(final=True)
