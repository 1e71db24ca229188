"""The synchronous PostgreSQL store raises trio_batch's errors only, never psycopg's.

:class:`PostgresJobStore` translated psycopg's errors around each call; called directly, the
sync :class:`PostgresStore` let them out raw (``LockNotAvailable`` from a create waiting on
the creation lock, ``OperationalError`` from a lost server). Every operation now raises
:class:`StoreUnavailable` with the driver's error as its cause.
"""

from __future__ import annotations

import inspect
import select
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

from trio_batch import JobState, OutcomeWrite, Result, StoreError, StoreUnavailable
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
    "close",
    "connection",
    "idle_connection",
    "in_doubt",
    "lost_in_commit",
    "open",
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
    "retries": lambda s, j: s.retries(j, caller="alice", now=T0, limit=8),
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


def _from_psycopg(exc: BaseException) -> bool:
    """Whether ``exc`` was translated from a psycopg error (its cause, or its cause's)."""
    cause = exc.__cause__
    while cause is not None and not isinstance(cause, psycopg.Error):
        cause = cause.__cause__
    return cause is not None


#: Every piece of plumbing, called on a store whose server has become unreachable: the ones
#: that reach the server must raise StoreError (StoreUnavailable but for ``open``), the rest
#: answer without it.
PLUMBING_CALLS: dict[str, Callable[[PostgresStore], Any]] = {
    "answered": lambda s: s.answered([], []),
    "close": lambda s: s.close(),
    "connection": lambda s: s.connection(),
    "idle_connection": lambda s: s.idle_connection(),
    "in_doubt": lambda s: s.in_doubt([]),
    "lost_in_commit": lambda s: s.lost_in_commit([]),
    "open": lambda s: PostgresStore.open(s.conninfo, store_timeout=2.0),
    "timed_out": lambda s: s.timed_out(),
    "too_late": lambda s: s.too_late(),
    "within": lambda s: s.within(time.monotonic() + 60, PostgresStore.connection),
}
#: The plumbing that needs the server, so raises once it is gone.
REACHES_THE_SERVER = {"connection", "open", "within"}


def test_the_plumbing_listed_is_all_of_it() -> None:
    assert set(PLUMBING_CALLS) == PLUMBING


@pytest.mark.parametrize("name", sorted(PLUMBING_CALLS))
def test_plumbing_on_a_lost_server_raises_only_store_errors(
    cut_off: tuple[PostgresStore, str], name: str
) -> None:
    store, _ = cut_off
    if name not in REACHES_THE_SERVER:
        PLUMBING_CALLS[name](store)  # no error at all, psycopg's or ours
        return
    expected = StoreError if name == "open" else StoreUnavailable
    with pytest.raises(expected) as refused:
        PLUMBING_CALLS[name](store)
    assert _from_psycopg(refused.value)


def test_a_connection_to_a_closed_port_raises_store_unavailable(pg_dsn: str) -> None:
    """Nothing listens at the store's address: the connect is refused at once."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # a port of our own, never listening
        port = unused.getsockname()[1]
        dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
        store = PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/{dbname}", store_timeout=2.0)
        try:
            for call in (store.connection, lambda: store.within(time.monotonic() + 60, _connect)):
                with pytest.raises(StoreUnavailable, match="refused") as refused:
                    call()
                assert isinstance(refused.value.__cause__, psycopg.OperationalError)
        finally:
            store.close(final=True)


def _connect(store: PostgresStore) -> object:
    return store.connection()


def test_a_backend_terminated_with_connections_refused_raises_store_unavailable(
    pg_dsn: str,
) -> None:
    """pg_terminate_backend ends the store's session, and the database takes no new one:
    the store's next connection is refused by the server itself."""
    store = PostgresStore.open(pg_dsn, store_timeout=2.0)
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    admin_dsn = psycopg.conninfo.make_conninfo(pg_dsn, dbname="postgres")
    admin = psycopg.connect(admin_dsn, autocommit=True)
    try:
        conn = store.connection()
        admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
        pid = conn.info.backend_pid
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        # The server's goodbye arrives on the store's socket (60 s: a hang guard only).
        assert select.select([conn.pgconn.socket], [], [], 60)[0]
        with pytest.raises(StoreUnavailable, match="not currently accepting") as refused:
            store.connection()
        assert isinstance(refused.value.__cause__, psycopg.OperationalError)
    finally:
        admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
        admin.close()
        store.close(final=True)


def test_within_raises_a_refused_statement_as_store_unavailable(pg_dsn: str) -> None:
    """A statement the server refuses inside ``within`` (not an operation's: plumbing used
    directly) comes out typed too; the store goes on."""
    store = PostgresStore.open(pg_dsn, store_timeout=2.0)
    try:
        with pytest.raises(StoreUnavailable, match="division by zero") as refused:
            store.within(time.monotonic() + 60, lambda s: s.connection().execute("SELECT 1/0"))
        assert isinstance(refused.value.__cause__, pg_errors.DivisionByZero)
        assert store.counts(now=T0).jobs["queued"] == 0
    finally:
        store.close(final=True)
