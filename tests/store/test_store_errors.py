"""The synchronous SQLite :class:`Store` raises trio_batch's errors only, never sqlite3's.

:class:`SQLiteJobStore` translated sqlite3's errors around each of its calls; called directly,
the sync :class:`Store` let them out raw (``OperationalError: database is locked`` from a
write that waited past the busy timeout for another process's lock, ``DatabaseError`` from a
damaged file, ``ProgrammingError`` once closed). Every public method now raises
:class:`StoreUnavailable` (or :class:`StoreError` once closed) with the sqlite3 error as its
cause, translated at the store lock's exits; and a refused write leaves the store as it was.
"""

from __future__ import annotations

import dataclasses
import inspect
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from trio_batch import (
    JobState,
    OutcomeWrite,
    Result,
    SQLiteJobStore,
    Store,
    StoreError,
    StoreUnavailable,
)
from trio_batch._model import new_job_id
from trio_batch.store import NewJob
from trio_batch.store.sqlite._errors import is_lock_error

from ..support.fakes import T0, urls
from ..support.sqlite_locker import locked_by_another_process

TTL = 3600.0
CAPS = {"targets_per_job": 64, "jobs_per_caller": 8, "jobs_total": 8}
#: Short, so a refused write does not keep the test waiting: SQLite's own wait, not a bound.
BUSY_TIMEOUT = 0.05
#: A job of carol's, cancelled: one that may be forgotten.
CAROLS = new_job_id()


def _new(caller: str = "bob", n: int = 1) -> NewJob:
    return NewJob(caller, "user", urls(*(f"{caller}{i}" for i in range(n))), ttl=TTL, **CAPS)


def _in_a_transaction(store: Store) -> None:
    with store.transaction() as db:
        db.execute("UPDATE jobs SET error = 'touched'")


#: The store's plumbing: opening and closing it, and what needs no database.
PLUMBING = {"close", "is_memory", "open", "reopen"}

#: Every other public method, called with arguments it could run with (the job exists).
OPERATIONS: dict[str, Callable[[Store, str], Any]] = {
    "checkpoint": lambda s, j: s.checkpoint(),
    "count_live_jobs": lambda s, j: s.count_live_jobs("alice"),
    "counts": lambda s, j: s.counts(now=T0),
    "create_job": lambda s, j: s.create_job(_new(), now=T0),
    "fail_live": lambda s, j: s.fail_live("shutdown", now=T0),
    "find_reusable_job": lambda s, j: s.find_reusable_job("alice", "k", now=T0),
    "finish_job": lambda s, j: s.finish_job(j, JobState.CANCELLED, now=T0),
    "forget_job": lambda s, j: s.forget_job(CAROLS, now=T0),
    "get_job": lambda s, j: s.get_job(j, now=T0),
    "get_status": lambda s, j: s.get_status(j, now=T0),
    "list_caller_jobs": lambda s, j: s.list_caller_jobs("alice", now=T0),
    "list_jobs": lambda s, j: s.list_jobs(now=T0),
    "mark_in_flight_failed": lambda s, j: s.mark_in_flight_failed("shutdown", now=T0),
    "purge_expired": lambda s, j: s.purge_expired(now=T0 + 2 * TTL),
    "record_outcome": lambda s, j: s.record_outcome(j, 0, result=Result("a0"), ttl=TTL, now=T0),
    "record_outcomes": lambda s, j: s.record_outcomes(
        [OutcomeWrite(j, 0, result=Result("a0"))], ttl=TTL, now=T0
    ),
    "transaction": lambda s, j: _in_a_transaction(s),
}

#: The operations that write, and so take the write lock another connection may hold.
WRITES = {
    "create_job",
    "fail_live",
    "finish_job",
    "forget_job",
    "mark_in_flight_failed",
    "purge_expired",
    "record_outcome",
    "record_outcomes",
    "transaction",
}


def test_the_operations_listed_are_every_public_method_but_the_plumbing() -> None:
    public = {name for name, _ in inspect.getmembers(Store) if not name.startswith("_")}
    assert public - PLUMBING == set(OPERATIONS)
    assert set(OPERATIONS) >= WRITES


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[tuple[Store, str, Path]]:
    """A file store with one live job of alice's, its id, and the database's path."""
    path = tmp_path / "jobs.db"
    store = Store.open(path, busy_timeout=BUSY_TIMEOUT)
    try:
        job, _ = store.create_job(_new("alice", 2), now=T0)
        store.create_job(dataclasses.replace(_new("carol"), job_id=CAROLS), now=T0)
        store.finish_job(CAROLS, JobState.CANCELLED, now=T0)
        yield store, job.id, path
    finally:
        store.close()


def _dump(path: Path) -> list[str]:
    """Everything in the database, read by a connection of its own (WAL: beside any lock)."""
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_write_refused_at_another_process_lock_raises_store_unavailable(
    opened: tuple[Store, str, Path], name: str
) -> None:
    store, job_id, path = opened
    before = _dump(path)
    with locked_by_another_process(path):
        with pytest.raises(StoreUnavailable, match="held the database lock") as refused:
            OPERATIONS[name](store, job_id)
        assert _dump(path) == before  # nothing written, nothing lost
    cause = refused.value.__cause__
    assert isinstance(cause, sqlite3.OperationalError) and is_lock_error(cause)
    assert not store.db.conn.in_transaction
    assert _dump(path) == before
    OPERATIONS[name](store, job_id)  # the lock gone, the same call goes through


def _damage(store: Store, path: Path) -> None:
    """Overwrite every page of the database but its header, under the running store, and let
    another connection commit a write to the header (so the store's page cache is dropped)."""
    store.checkpoint("TRUNCATE")  # every page in the database file, none in the WAL
    page_size = int(store.db.execute("PRAGMA page_size").fetchone()[0])
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(page_size)
        f.write(b"damaged!" * ((size - page_size) // 8))
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("PRAGMA user_version = 5")  # the same version: page 1 only
    finally:
        other.close()


@pytest.mark.parametrize("name", sorted(set(OPERATIONS) - {"checkpoint"}))
def test_a_file_damaged_under_a_running_store_raises_store_unavailable(
    opened: tuple[Store, str, Path], name: str
) -> None:
    store, job_id, path = opened
    _damage(store, path)
    with pytest.raises(StoreUnavailable, match="damaged") as refused:
        OPERATIONS[name](store, job_id)
    assert isinstance(refused.value.__cause__, sqlite3.DatabaseError)
    assert not store.db.conn.in_transaction


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_a_closed_store_raises_store_error(opened: tuple[Store, str, Path], name: str) -> None:
    store, job_id, path = opened
    before = _dump(path)
    store.close()
    with pytest.raises(StoreError, match="closed") as refused:
        OPERATIONS[name](store, job_id)
    assert isinstance(refused.value.__cause__, sqlite3.ProgrammingError)
    assert _dump(path) == before


@pytest.mark.parametrize("name", ["create_job", "record_outcome"])
def test_a_write_on_a_full_database_raises_store_unavailable_and_keeps_the_store(
    opened: tuple[Store, str, Path], name: str
) -> None:
    store, job_id, path = opened
    store.checkpoint("TRUNCATE")
    before = _dump(path)
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own limit: a full disk
    big = "x" * 5000
    with pytest.raises(StoreUnavailable, match="the disk or the database is full") as refused:
        if name == "create_job":
            targets = urls(*(f"{i}{big}" for i in range(60)))
            store.create_job(NewJob("bob", "user", targets, ttl=TTL, **CAPS), now=T0)
        else:
            store.record_outcome(job_id, 0, result=Result(big * 20), ttl=TTL, now=T0)
    assert isinstance(refused.value.__cause__, sqlite3.OperationalError)
    assert not store.db.conn.in_transaction
    assert _dump(path) == before


def test_a_store_reopened_after_its_file_was_deleted_raises_store_error(
    opened: tuple[Store, str, Path],
) -> None:
    """Regression: the reopen created a new, empty database at the path, and the second
    connection (the fast path's) then wrote jobs that the first one never saw."""
    store, job_id, path = opened
    path.unlink()
    with pytest.raises(StoreError, match="cannot open the database") as refused:
        store.reopen()
    assert isinstance(refused.value.__cause__, sqlite3.OperationalError)
    assert not path.exists()
    assert store.get_job(job_id, now=T0) is not None  # the running store still answers


async def test_a_write_waits_on_the_store_thread_for_another_process_lock(
    tmp_path: Path,
) -> None:
    """The store thread waits for the lock (up to its busy timeout), then writes; the loop
    goes on meanwhile."""
    path = tmp_path / "jobs.db"
    store = SQLiteJobStore(Store.open(path, busy_timeout=60), owns_store=True)
    created: list[bool] = []

    async def create() -> None:
        _, reused = await store.create_job(_new(), now=T0)
        created.append(not reused)

    try:
        await store.get_job("none", now=T0)  # started
        async with trio.open_nursery() as nursery:
            with locked_by_another_process(path):
                nursery.start_soon(create)
                await wait_all_tasks_blocked()  # the call waits on the store thread
                assert not created
        assert created == [True]  # once the lock was gone
    finally:
        await store.aclose()
