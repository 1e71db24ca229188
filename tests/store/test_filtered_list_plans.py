"""A caller's filtered job lists (``list_caller_jobs`` with a ``JobFilter``) are read off an
index, never by scanning a table: the query plans of the reads the store builds, on SQLite
(``EXPLAIN QUERY PLAN``) and on PostgreSQL (``EXPLAIN``, sequential scans disabled so the
planner takes an index wherever one fits, whatever the table's size)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from trio_batch import JobState, Store
from trio_batch.store import JobFilter, NewJob
from trio_batch.store._filters import filtered_queries
from trio_batch.store.postgres import PostgresStore
from trio_batch.store.postgres import _queries as pg_queries
from trio_batch.store.sqlite import _queries as sqlite_queries

from ..support.fakes import urls

TTL, T0 = 3600.0, 1_000_000.0
CAPS = {"targets_per_job": 8, "jobs_per_caller": 50, "jobs_total": 100}

#: Each filter, and the index its reads must use.
FILTERS = [
    pytest.param(
        JobFilter(statuses=frozenset({JobState.QUEUED})), "jobs_caller_status_created", id="status"
    ),
    pytest.param(
        JobFilter(statuses=frozenset({JobState.QUEUED, JobState.CANCELLED})),
        "jobs_caller_status_created",
        id="two-statuses",
    ),
    pytest.param(JobFilter(labels=(("team", "a"),)), "job_labels_filter", id="label"),
    pytest.param(
        JobFilter(statuses=frozenset({JobState.QUEUED}), labels=(("team", "a"), ("k", "v"))),
        "job_labels_filter",
        id="status-and-labels",
    ),
]


def _fill(store: Any) -> None:
    """Jobs of two callers, some labelled, one cancelled: rows for the planner to choose in."""
    for n in range(20):
        caller = "alice" if n % 2 else "bob"
        metadata = {"team": "a" if n % 3 else "b", "k": "v"}
        job, _ = store.create_job(
            NewJob(caller, "user", urls(f"u{n}"), ttl=TTL, metadata=metadata, **CAPS), now=T0 + n
        )
        if n % 5 == 0:
            store.finish_job(job.id, JobState.CANCELLED, now=T0 + n)


@pytest.mark.parametrize(("where", "index"), FILTERS)
def test_sqlite_filtered_lists_are_read_off_an_index(where: JobFilter, index: str) -> None:
    with Store.open() as store:
        _fill(store)
        assert store.list_caller_jobs("alice", now=T0, where=where)  # the filter finds jobs
        reads = filtered_queries(
            sqlite_queries.JOB_COLUMN_NAMES, "alice", where, now=T0, limit=20, before=(T0 + 9, "z")
        )
        for sql, params in reads:
            plan = [row[3] for row in store.db.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
            assert not [step for step in plan if step.startswith("SCAN")], plan
            assert any(index in step for step in plan), plan
            assert not [step for step in plan if "TEMP B-TREE" in step], plan  # no sort


@pytest.mark.parametrize(("where", "index"), FILTERS)
def test_postgres_filtered_lists_are_read_off_an_index(
    pg_dsn: str, where: JobFilter, index: str
) -> None:
    store = PostgresStore.open(pg_dsn)
    try:
        _fill(store)
        assert store.list_caller_jobs("alice", now=T0, limit=20, where=where)
    finally:
        store.close()
    reads = filtered_queries(
        pg_queries.JOB_COLUMN_NAMES,
        "alice",
        where,
        now=T0,
        limit=20,
        before=(T0 + 9, "z"),
        jobs=pg_queries.JOBS_NOW,
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
        conn.execute("SET enable_seqscan = off")
        for sql, params in reads:
            rows = conn.execute(f"EXPLAIN {sql.replace('?', '%s')}", params).fetchall()
            plan = "\n".join(str(row[0]) for row in rows)
            assert "Seq Scan" not in plan, plan
            assert index in plan, plan
