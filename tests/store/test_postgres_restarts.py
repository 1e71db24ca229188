"""A PostgreSQL store through restarts, killed connections and a partition: a connection that
died while idle is never handed to a call, and every call is bounded by ``store_timeout``.

The partition is a real TCP proxy on 127.0.0.1 (``cuttable_proxy.py``) that holds all traffic:
the kernel still acknowledges what the client sends, so only the store's own bound notices.
Durations are printed as figures, never asserted against a threshold.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import trio

from trio_batch import StoreUnavailable
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresJobStore, PostgresStore
from trio_batch.store.postgres import _queries as q

from ..runner.test_postgres_cluster import _sql, _until
from ..support.cuttable_proxy import CuttableProxy
from ..support.fakes import urls
from ..support.figures import Figures
from ..support.pg_server import PgServer, through

TTL, T0 = 3600.0, 1_000_000.0
CAPS = {"targets_per_job": 8, "jobs_per_caller": 4, "jobs_total": 16}
#: How long a store call on a thread of its own may run before the test calls it hung.
HANG_GUARD = 30.0
NO_JOB = "unknown-job-id-0000000"  # a job id no job has


def _store_backends(dsn: str) -> int:
    rows = _sql(
        dsn,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = 'trio_batch' AND datname = current_database()",
    )
    return int(rows[0][0])


def _kill_store_backends(dsn: str) -> None:
    _sql(
        dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'trio_batch' AND datname = current_database()",
    )


async def test_a_submit_right_after_a_database_restart_succeeds(
    pg_dsn: str, pg_server: PgServer
) -> None:
    async with PostgresJobStore.open(pg_dsn) as store:
        job, _ = await store.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **CAPS), now=T0)
        pg_server.stop("fast")  # the store's connection dies while idle
        pg_server.start()
        again, reused = await store.create_job(
            NewJob("bob", "user", urls("b"), ttl=TTL, **CAPS), now=T0
        )
        assert not reused and again.caller == "bob"
        assert await store.get_job(job.id, now=T0) == job


async def test_a_connection_killed_while_idle_is_replaced_before_a_write(pg_dsn: str) -> None:
    async with PostgresJobStore.open(pg_dsn) as store:
        job, _ = await store.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **CAPS), now=T0)
        _kill_store_backends(pg_dsn)
        await trio.to_thread.run_sync(
            _until, lambda: _store_backends(pg_dsn) == 0, "the backend to be gone"
        )
        # A write is never retried after a lost connection (it may have committed): this one
        # succeeds because the dead connection is found before the write is sent.
        assert await store.fail_own_jobs("shutdown", now=T0) == 1
        assert (await store.get_job(job.id, now=T0)).status.value == "failed"  # type: ignore[union-attr]


async def test_a_read_on_a_connection_killed_under_it_is_retried_once(pg_dsn: str) -> None:
    async with PostgresJobStore.open(pg_dsn) as store:
        job, _ = await store.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **CAPS), now=T0)
        for _ in range(5):  # killed at once, before the backend is gone: either check holds
            _kill_store_backends(pg_dsn)
            assert await store.get_job(job.id, now=T0) == job


async def test_a_status_call_during_a_partition_fails_within_store_timeout(
    pg_dsn: str, pg_proxy: CuttableProxy, figures: Figures
) -> None:
    timeout = 1.0
    async with PostgresJobStore.open(through(pg_proxy, pg_dsn), store_timeout=timeout) as store:
        job, _ = await store.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **CAPS), now=T0)
        pg_proxy.hold()
        took: list[float] = []
        errors: list[str] = []

        async def status() -> None:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as caught:
                await store.get_status(job.id, now=T0)
            took.append(time.monotonic() - started)
            errors.append(str(caught.value))

        async with trio.open_nursery() as nursery:  # the second waits behind the first
            nursery.start_soon(status)
            nursery.start_soon(status)
        assert any("did not answer within store_timeout (1 s)" in e for e in errors), errors
        assert all("store_timeout" in e for e in errors), errors
        # Reconnecting through the partition is bounded too.
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await store.get_job(job.id, now=T0)
        reconnect = time.monotonic() - started
        pg_proxy.release()
        assert await store.get_job(job.id, now=T0) == job
    figures.add(
        f"postgres partition: status calls failed after {max(took):.2f} s and {min(took):.2f} s "
        f"(the second queued behind the first), a call needing a new connection after "
        f"{reconnect:.2f} s (store_timeout {timeout:g} s; libpq's connect_timeout is at least 2 s)"
    )


def _in_a_thread(call: Callable[[], object]) -> list[BaseException]:
    """``call()`` on a thread of its own: what it raised (empty if it returned). Fails if it
    has not ended within the hang guard (the call would hang for good)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD)
    assert not thread.is_alive(), "the store call did not end by its deadline"
    return raised


def test_a_connection_settling_through_a_partition_is_cut_at_the_calls_deadline(
    pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    """Connected, the store asks the server which process serves it (pooled or not): a
    partition from that moment held that question for good, beyond any deadline (the
    watchdog cut only an open connection). Now the call fails StoreUnavailable at its bound."""
    store = PostgresStore.open(through(pg_proxy, pg_dsn), store_timeout=1.0)
    try:
        store.close()  # the next call connects
        pg_proxy.hold_on(q.BACKEND_PID.encode())
        deadline = time.monotonic() + store.store_timeout
        raised = _in_a_thread(lambda: store.within(deadline, PostgresStore.get_job, NO_JOB, now=T0))
        assert pg_proxy.held.is_set()
        assert [type(e) for e in raised] == [StoreUnavailable], raised
        assert "did not answer within store_timeout" in str(raised[0])
        assert not store.is_open
        pg_proxy.release()
        assert store.within(time.monotonic() + 10, PostgresStore.get_job, NO_JOB, now=T0) is None
    finally:
        pg_proxy.release()
        store.close(final=True)


def test_a_connection_attempt_is_bounded_by_what_is_left_of_its_calls_deadline(
    pg_dsn: str, pg_proxy: CuttableProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call with one second left (it waited behind others, or a first attempt took the rest)
    that must connect through a partition gives up within libpq's least connect_timeout (2 s),
    not a whole connect_timeout of its own (60 s here) on top of its deadline. (Before the
    fix the hang guard fails the test.)"""
    store = PostgresStore.open(through(pg_proxy, pg_dsn), store_timeout=60.0)
    given: list[object] = []
    real = psycopg.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        given.append(kwargs.get("connect_timeout"))
        return real(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", connect)
    try:
        store.close()
        pg_proxy.hold()
        deadline = time.monotonic() + 1.0
        raised = _in_a_thread(lambda: store.within(deadline, PostgresStore.get_job, NO_JOB, now=T0))
        # psycopg's timeout (the store's face calls it StoreUnavailable), or the watchdog's.
        assert [type(e) for e in raised] in ([psycopg.errors.ConnectionTimeout], [StoreUnavailable])
        assert given == [2]  # the whole seconds left, at least libpq's 2
    finally:
        pg_proxy.release()
        store.close(final=True)


def test_a_call_with_less_time_left_than_the_watchdogs_poll_is_cut_at_its_deadline(
    pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    """The watchdog looks at the call it guards every quarter of store_timeout: a call given
    a nearer deadline (it waited behind others, or an earlier step of its own took the rest)
    wakes it, so its cut comes at that deadline, not up to a quarter of the timeout later
    (15 minutes here: the hang guard fails first)."""
    store = PostgresStore.open(through(pg_proxy, pg_dsn), store_timeout=3600.0)
    try:
        assert store.within(time.monotonic() + 10, PostgresStore.get_job, NO_JOB, now=T0) is None
        pg_proxy.hold()
        deadline = time.monotonic() + 0.5
        raised = _in_a_thread(lambda: store.within(deadline, PostgresStore.get_job, NO_JOB, now=T0))
        assert [type(e) for e in raised] == [StoreUnavailable], raised
        assert "did not answer within store_timeout" in str(raised[0])
    finally:
        pg_proxy.release()
        store.close(final=True)
