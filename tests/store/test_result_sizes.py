"""A stored result's size is kept beside it, so the job view sizes results without reading
them (``length()`` of a text reads the whole value: 120 ms for a job of 16 results of 9 MB).
Rows stored before the column are sized by their length, as before."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg

from trio_batch import OutcomeWrite, Result, open_store
from trio_batch.store import JobStore, NewJob

from ..support.fakes import T0, urls

TTL = 3600.0
CAPS = {"targets_per_job": 8, "jobs_per_caller": 4, "jobs_total": 8}
RESULT = Result("é" * 1000, {"n": 1})
SIZE = len(RESULT.to_json_text())

Sql = Callable[[str, tuple[object, ...]], list[tuple[object, ...]]]


def _sqlite_sql(path: Path) -> Sql:
    def run(sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        with sqlite3.connect(path, isolation_level=None) as conn:  # beside the store's own
            return conn.execute(sql.replace("%s", "?"), params).fetchall()

    return run


def _pg_sql(dsn: str) -> Sql:
    def run(sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    return run


async def _check_sizes(store: JobStore, sql: Sql) -> None:
    new = NewJob("alice", "user", urls("a", "b", "c"), ttl=TTL, **CAPS)
    job, _ = await store.create_job(new, now=T0)
    await store.record_outcome(OutcomeWrite(job.id, 0, result=RESULT), ttl=TTL, now=T0 + 1)
    await store.record_outcome(OutcomeWrite(job.id, 1, error="E: no"), ttl=TTL, now=T0 + 2)
    stored = sql("SELECT idx, result_size FROM targets WHERE job_id = %s ORDER BY idx", (job.id,))
    assert stored == [(0, SIZE), (1, 0), (2, None)]

    async def sizes() -> list[int]:
        found = await store.get_overview(job.id, now=T0 + 3)
        assert found is not None
        return found[2]

    assert await sizes() == [SIZE, 0, 0]
    # The view reads the column, not the result: a size written there is the one shown ...
    sql("UPDATE targets SET result_size = 7 WHERE job_id = %s AND idx = 0", (job.id,))
    assert await sizes() == [7, 0, 0]
    # ... and a row stored before the column (NULL) is sized by its length.
    sql("UPDATE targets SET result_size = NULL WHERE job_id = %s AND idx = 0", (job.id,))
    assert await sizes() == [SIZE, 0, 0]
    # A page of outcomes that leaves out results over a bound sizes them the same way.
    page = await store.get_outcomes(job.id, 0, now=T0 + 3, limit=10, results_up_to=SIZE - 1)
    assert page is not None and page[1][0].result is None
    sql("UPDATE targets SET result_size = 3 WHERE job_id = %s AND idx = 0", (job.id,))
    page = await store.get_outcomes(job.id, 0, now=T0 + 3, limit=10, results_up_to=SIZE - 1)
    assert page is not None and page[1][0].result == RESULT


async def test_sqlite_keeps_each_results_size_beside_it(tmp_path: Path) -> None:
    async with open_store(str(tmp_path / "sizes.db")) as store:
        await _check_sizes(store, _sqlite_sql(tmp_path / "sizes.db"))


async def test_postgres_keeps_each_results_size_beside_it(pg_dsn: str) -> None:
    async with open_store(pg_dsn) as store:
        await _check_sizes(store, _pg_sql(pg_dsn))
