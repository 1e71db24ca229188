"""The synchronous PostgreSQL store raises trio_batch's errors only, never psycopg's.

:class:`PostgresJobStore` translated psycopg's errors around each call; called directly, the
sync :class:`PostgresStore` let them out raw (``LockNotAvailable`` from a create waiting on
the creation lock, ``OperationalError`` from a lost server). Every operation now raises
:class:`StoreUnavailable` with the driver's error as its cause.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

from trio_batch import JobState, OutcomeWrite, Result, StoreUnavailable
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresStore
from trio_batch.store.postgres import _queries as q

from ..support.cuttable_proxy import CuttableProxy
from ..support.fakes import T0, urls
from ..support.pg_server import through

TTL = 3600.0
CAPS = {"targets_per_job": 8, "jobs_per_caller": 8, "jobs_total": 8}


def _new(caller: str = "alice") -> NewJob:
    return NewJob(caller, "user", urls("a"), ttl=TTL, **CAPS)


def test_a_sync_create_that_waits_past_its_lock_timeout_raises_store_unavailable(
    pg_dsn: str,
) -> None:
    store = PostgresStore.open(pg_dsn, store_timeout=0.5)  # lock_timeout: 0.25 s
    try:
        with psycopg.connect(pg_dsn) as holder:  # not autocommit: held until the rollback
            holder.execute(q.XACT_LOCK, (q.LOCK_CLASS, q.LOCK_CREATE))
            with pytest.raises(StoreUnavailable, match="lock_timeout") as refused:
                store.create_job(_new(), now=T0)
            holder.rollback()
        assert isinstance(refused.value.__cause__, pg_errors.LockNotAvailable)
        assert not store.create_job(_new(), now=T0)[1]  # the store goes on
    finally:
        store.close(final=True)


#: The store's plumbing, for its async face: a connection, the bounds, the in-doubt marks.
PLUMBING = {
    "answered",
    "bounds_values",
    "close",
    "connection",
    "idle_connection",
    "in_doubt",
    "lost_in_commit",
    "open",
    "tally_mark",
    "timed_out",
    "too_late",
    "within",
}

#: Every operation, called with arguments it could run with (the job exists).
OPERATIONS: dict[str, Callable[[PostgresStore, str], Any]] = {
    "counts": lambda s, j: s.counts(now=T0),
    "create_job": lambda s, j: s.create_job(_new("bob"), now=T0),
    "drain_changes": lambda s, j: s.drain_changes([j]),
    "drain_over": lambda s, j: s.drain_over(j),
    "fail_own_jobs": lambda s, j: s.fail_own_jobs("shutdown", now=T0),
    "finish_job": lambda s, j: s.finish_job(j, JobState.CANCELLED, now=T0),
    "forget_job": lambda s, j: s.forget_job(j, now=T0),
    "get_job": lambda s, j: s.get_job(j, now=T0),
    "get_outcomes": lambda s, j: s.get_outcomes(j, 0, now=T0, limit=8),
    "get_overview": lambda s, j: s.get_overview(j, now=T0),
    "get_status": lambda s, j: s.get_status(j, now=T0),
    "get_target": lambda s, j: s.get_target(j, 0, now=T0),
    "get_targets_after": lambda s, j: s.get_targets_after(j, -1, now=T0, limit=8),
    "heartbeat": lambda s, j: s.heartbeat("runner"),
    "latest_retry": lambda s, j: s.latest_retry(j, caller="alice", now=T0),
    "list_caller_jobs": lambda s, j: s.list_caller_jobs("alice", now=T0, limit=8),
    "list_jobs": lambda s, j: s.list_jobs(now=T0),
    "notify_jobs": lambda s, j: s.notify_jobs([j]),
    "purge_expired": lambda s, j: s.purge_expired(now=T0, batch_size=8),
    "reap": lambda s, j: s.reap(30, now=T0),
    "record_outcomes": lambda s, j: s.record_outcomes(
        [OutcomeWrite(j, 0, result=Result(""))], ttl=TTL, now=T0
    ),
    "register_runner": lambda s, j: s.register_runner(),
    "release_job": lambda s, j: s.release_job(j),
    "undrained_jobs": lambda s, j: s.undrained_jobs([], now=T0, limit=8),
    "unregister_runner": lambda s, j: s.unregister_runner("runner"),
    "watch_job": lambda s, j: s.watch_job(j),
}


def test_the_operations_listed_are_every_public_method_but_the_plumbing() -> None:
    public = {
        name
        for name, member in inspect.getmembers(PostgresStore, callable)
        if not name.startswith("_")
    }
    assert public - PLUMBING == set(OPERATIONS)


@pytest.fixture
def cut_off(pg_dsn: str, pg_proxy: CuttableProxy) -> Iterator[tuple[PostgresStore, str]]:
    """A sync store whose server has become unreachable, and the id of a job it created."""
    store = PostgresStore.open(through(pg_proxy, pg_dsn), store_timeout=2.0)
    try:
        job, _ = store.create_job(_new(), now=T0)
        pg_proxy.refusing = True  # a reconnect is accepted, then closed at once
        pg_proxy.cut()
        yield store, job.id
    finally:
        store.close(final=True)


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_an_operation_on_a_lost_server_raises_store_unavailable(
    cut_off: tuple[PostgresStore, str], name: str
) -> None:
    store, job_id = cut_off
    with pytest.raises(StoreUnavailable) as refused:
        OPERATIONS[name](store, job_id)
    assert isinstance(refused.value.__cause__, psycopg.Error)
