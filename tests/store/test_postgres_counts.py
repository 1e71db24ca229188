"""``counts`` (what ``/metrics`` shows) on a large table: the live jobs are counted at every
call, the terminal ones (every other unexpired row) at most every ``terminal_counts_max_age``
seconds, kept up to date with the store's own finished jobs meanwhile."""

from __future__ import annotations

import time

import psycopg

from trio_batch import JobState, OutcomeWrite, Result
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresStore

from ..support.fakes import urls
from ..support.figures import Figures

TTL, T0 = 3600.0, 1_000_000.0
CAPS = {"targets_per_job": 8, "jobs_per_caller": 4, "jobs_total": 16}
ROWS = 100_000


def _fill(dsn: str, rows: int) -> None:
    """``rows`` done jobs of 4 targets (job rows only: counts read no target)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (id, status, targets_total, targets_done, caller, caller_class, "
            "idem_key, created_at, updated_at, expires_at) "
            "SELECT 'fill' || i, 'done', 4, 4, 'c' || (i %% 1000), 'user', 'k' || i, %s, %s, %s "
            "FROM generate_series(1, %s) AS i",
            (T0, T0, T0 + TTL, rows),
        )
        conn.execute("ANALYZE jobs")


def test_counts_reuse_the_terminal_tally_and_keep_it_up_to_date(
    pg_dsn: str, figures: Figures
) -> None:
    a = PostgresStore.open(pg_dsn)
    b = PostgresStore.open(pg_dsn)
    try:
        _fill(pg_dsn, ROWS)
        started = time.perf_counter()
        first = a.counts(now=T0)
        full = time.perf_counter() - started
        assert first.jobs["done"] == ROWS and first.targets_total == 4 * ROWS
        # Live jobs are counted at every call.
        job, _ = a.create_job(NewJob("alice", "user", urls("x", "y"), ttl=TTL, **CAPS), now=T0)
        started = time.perf_counter()
        assert a.counts(now=T0).jobs["queued"] == 1
        reused = time.perf_counter() - started
        # A job of this store's that finishes is counted at once ...
        for idx in (0, 1):
            a.record_outcomes([OutcomeWrite(job.id, idx, result=Result("r"))], ttl=TTL, now=T0)
        after = a.counts(now=T0)
        assert (after.jobs["queued"], after.jobs["done"]) == (0, ROWS + 1)
        assert (after.targets_total, after.targets_done) == (4 * ROWS + 2, 4 * ROWS + 2)
        # ... and so is a cancel; another store's finished job shows once the tally is old.
        mine, _ = a.create_job(NewJob("bob", "user", urls("z"), ttl=TTL, **CAPS), now=T0)
        assert a.finish_job(mine.id, JobState.CANCELLED, now=T0) is not None
        theirs, _ = b.create_job(NewJob("carol", "user", urls("w"), ttl=TTL, **CAPS), now=T0)
        assert b.finish_job(theirs.id, JobState.CANCELLED, now=T0) is not None
        assert a.counts(now=T0).jobs["cancelled"] == 1
        a.terminal_counts_max_age = 0
        exact = a.counts(now=T0)
        assert exact.jobs["cancelled"] == 2 and exact.targets_abandoned == 2
    finally:
        a.close(final=True)
        b.close(final=True)
    figures.add(
        f"postgres counts on {ROWS:,} jobs: {full * 1000:.0f} ms counting every row, "
        f"{reused * 1000:.1f} ms reusing the terminal tally (live jobs counted every call)"
    )
