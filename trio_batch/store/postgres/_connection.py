"""One PostgreSQL connection for the store: opening it, its timeouts, and reconnecting.

One :class:`PostgresConnection` owns one connection and is used from one thread at a time (its
store thread). The connection is in autocommit mode; every state change is one explicit
transaction. Every statement is bounded by ``statement_timeout`` and every lock wait (advisory
locks included) by ``lock_timeout``. A lost connection is reopened at the next call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self, TypeVar

import psycopg

from ..._errors import StoreError
from . import _queries as q
from ._errors import connection_lost
from ._schema import migrate

__all__ = ["Conn", "PostgresConnection", "safe_location"]

T = TypeVar("T")

Conn = psycopg.Connection[Any]


def safe_location(conninfo: str) -> str:
    """``conninfo`` without its password, for messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"not a PostgreSQL connection string or URL: {exc}") from None
    params.pop("password", None)
    return "PostgreSQL " + psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})


def _millis(seconds: float) -> str:
    return str(max(1, round(seconds * 1000)))


class PostgresConnection:
    """The store's connection; :class:`~trio_batch.store.postgres.PostgresStore` adds the
    operations. ``runner_id`` is the runner this connection writes for (None: no runner)."""

    def __init__(
        self,
        conninfo: str,
        *,
        lock_timeout: float,
        statement_timeout: float,
        connect_timeout: float,
    ) -> None:
        self.conninfo = conninfo
        self.location = safe_location(conninfo)
        self.lock_timeout = lock_timeout
        self.statement_timeout = statement_timeout
        self.connect_timeout = connect_timeout
        self.runner_id: str | None = None
        self._conn: Conn | None = None
        # (job_id, idx) of outcome writes whose commit was cut off: they may have committed.
        self._maybe_committed: set[tuple[str, int]] = set()

    @classmethod
    def open(
        cls,
        conninfo: str,
        *,
        lock_timeout: float = 5.0,
        statement_timeout: float = 30.0,
        connect_timeout: float = 10.0,
    ) -> Self:
        """Connect to ``conninfo`` (a URL or libpq keywords) and create or migrate the schema.

        Raises :class:`StoreError` if the server cannot be reached or refuses us, and
        :class:`SchemaVersionError` for a newer or foreign schema.
        """
        store = cls(
            conninfo,
            lock_timeout=lock_timeout,
            statement_timeout=statement_timeout,
            connect_timeout=connect_timeout,
        )
        try:
            migrate(store.connection(), store.location)
        except psycopg.Error as exc:
            store.close()
            raise StoreError(f"cannot open {store.location} as a trio_batch store: {exc}") from exc
        except BaseException:
            store.close()
            raise
        return store

    def connection(self) -> Conn:
        """The open connection, reconnecting first if it was lost."""
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        conn = psycopg.connect(
            self.conninfo,
            autocommit=True,
            connect_timeout=max(1, round(self.connect_timeout)),
            application_name="trio_batch",
        )
        try:
            for name, value in (
                ("statement_timeout", _millis(self.statement_timeout)),
                ("lock_timeout", _millis(self.lock_timeout)),
                # A transaction left open by a stuck client is ended by the server.
                ("idle_in_transaction_session_timeout", _millis(2 * self.statement_timeout)),
            ):
                conn.execute(q.SET_SETTING, (name, value))
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def close(self) -> None:
        """Close the connection; a later call would open a new one."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _forget_if_lost(self, exc: psycopg.Error) -> None:
        if connection_lost(exc, self._conn):
            self.close()  # reopened at the next call

    def _run(self, fn: Callable[[Conn], T]) -> T:
        """``fn(connection)``; a psycopg error that means the connection is gone drops it, so
        the next call reconnects."""
        try:
            return fn(self.connection())
        except psycopg.Error as exc:
            self._forget_if_lost(exc)
            raise
