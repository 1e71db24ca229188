"""psycopg's errors, translated into trio_batch's typed ones: the only place that reads them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from psycopg import errors as pg_errors

from ..._errors import StoreError, StoreUnavailable

__all__ = ["connection_lost", "translate_errors", "unavailable"]


def connection_lost(exc: psycopg.Error, conn: psycopg.Connection[object] | None) -> bool:
    """True if ``exc`` means the connection is gone (a restart, a network cut, a kill).

    A write that failed so may have committed: the server can have committed it just before
    the answer was lost.
    """
    if conn is not None and (conn.closed or conn.broken):
        return True
    return isinstance(
        exc, pg_errors.AdminShutdown | pg_errors.CrashShutdown | pg_errors.CannotConnectNow
    )


def unavailable(exc: psycopg.Error, store_timeout: float) -> StoreError:
    """A clear, typed error for a database that refused a call (``raise ... from exc``)."""
    if isinstance(exc, pg_errors.LockNotAvailable):
        why = (
            "another connection held a lock this call needed for longer than its lock_timeout "
            f"(half of store_timeout, {store_timeout:g} s)"
        )
    elif isinstance(exc, pg_errors.IdleInTransactionSessionTimeout):
        why = (
            "the database ended this connection's transaction: it waited longer than "
            f"store_timeout ({store_timeout:g} s) between statements"
        )
    elif isinstance(exc, pg_errors.QueryCanceled):
        why = (
            f"the statement ran longer than statement_timeout (store_timeout, {store_timeout:g} s)"
        )
    elif isinstance(exc, pg_errors.DiskFull | pg_errors.OutOfMemory):
        why = "the database server is out of disk or memory"
    elif isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        why = "the connection to the PostgreSQL server failed or was lost"
    else:
        why = "the database refused the operation"
    return StoreUnavailable(f"{why}: {exc}".rstrip())


@contextlib.contextmanager
def translate_errors(store_timeout: float) -> Iterator[None]:
    """Turn psycopg errors into :class:`StoreUnavailable`.

    A store call that raised one changed nothing, except where the connection was lost during
    a commit (see :func:`connection_lost`): the caller retries, and the store recognises a
    write it already made.
    """
    try:
        yield
    except psycopg.Error as exc:
        raise unavailable(exc, store_timeout) from exc
