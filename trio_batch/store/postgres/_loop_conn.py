"""One PostgreSQL connection driven from trio's own loop: no store thread between a task and
its statements.

The store thread's hand-over costs each call 115-130 µs (see docs/explanation/performance.md),
most of a lone outcome write beside the statement itself. A :class:`LoopConnection` sends its
statements from the calling task instead, through psycopg's public libpq wrapper
(``conn.pgconn``, :mod:`psycopg.pq`): they and a ``Sync`` are queued in pipeline mode, flushed
without blocking (the connection is non-blocking, as psycopg leaves every connection), and the
answers read as the socket becomes readable (``trio.lowlevel.wait_readable``). Each exchange
is one implicit transaction: the server commits what precedes a ``Sync`` together, or, once a
statement fails, none of it. Rows are decoded by psycopg's own loaders (a
:class:`psycopg.adapt.Transformer` bound to the connection, as its cursors use).

Opening stays on a worker thread: :class:`~._connection.PostgresConnection` connects and
settles the connection (pooled or direct; a direct one's bounds as session settings) exactly
as the store's own, within the same bound. A connection found dead before an exchange (a
restart while it was idle) is replaced first; one lost during an exchange is closed, and the
next exchange opens another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import trio
from psycopg import abc, pq
from psycopg.abc import Buffer
from psycopg.adapt import PyFormat, Transformer

from .._thread import thread_deadline
from ._connection import Conn, PostgresConnection

__all__ = ["LoopConnection", "Statement"]

_SYNC = pq.ExecStatus.PIPELINE_SYNC
_FAILED = pq.ExecStatus.FATAL_ERROR
_ANSWERED = pq.ExecStatus.TUPLES_OK  # every statement sent answers rows
_PREPARED = pq.ExecStatus.COMMAND_OK


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement of an exchange: ``sql`` with numbered parameters (``$1``...) and their
    values as text (:meth:`LoopConnection.dump`). ``name``: prepared under that name on a
    direct connection (at its first use there); a pooled connection prepares nothing."""

    sql: bytes
    params: Sequence[Buffer | None] = ()
    name: bytes | None = None


#: Builds an exchange's statements once the connection is open (they depend on whether it is
#: pooled, and their values are dumped by its adapters).
Build = Callable[["LoopConnection"], Sequence[Statement]]


class LoopConnection:
    """A connection of ``opener``'s settings whose exchanges run on trio's loop.

    Used by one task at a time (a group commit's leader). :attr:`opener` opens and holds the
    connection; :meth:`exchange` is the one way statements are sent.
    """

    def __init__(self, opener: PostgresConnection) -> None:
        self.opener = opener
        self._prepared: set[bytes] = set()
        self._prepared_on: Conn | None = None  # the connection _prepared is about
        self._tx: abc.Transformer | None = None

    @property
    def pooled(self) -> bool:
        """Whether the open connection goes through a pooler (only known once open)."""
        return bool(self.opener.pooled)

    @property
    def is_open(self) -> bool:
        """True if a connection is open: False once one was lost or dropped (anything its last
        exchange sent may have committed) until the next exchange opens another."""
        return self.opener.is_open

    def close(self) -> None:
        """Close the connection (the next exchange opens another); safe to call twice."""
        self.opener.close()

    def dump(self, values: Sequence[Any]) -> Sequence[Buffer | None]:
        """``values`` as text parameters, by the open connection's dumpers."""
        assert self._tx is not None  # only called by a Build, once the connection is open
        return self._tx.dump_sequence(values, [PyFormat.TEXT] * len(values))

    def row(self, result: pq.abc.PGresult) -> tuple[Any, ...] | None:
        """The first row of ``result`` (an exchange's), decoded; None if it has none."""
        if result.ntuples == 0:
            return None
        assert self._tx is not None  # set when the connection that answered was opened
        self._tx.set_pgresult(result)
        row: tuple[Any, ...] = self._tx.load_row(0, tuple)
        return row

    async def exchange(self, build: Build, deadline: float | None = None) -> list[pq.abc.PGresult]:
        """Send the statements ``build(self)`` returns, in one pipeline closed by a ``Sync``
        (one transaction), and return each one's result, by ``deadline`` (trio time; None:
        ``store_timeout`` from now). A store call of several exchanges passes each its own
        one deadline, so the call as a whole keeps its bound.

        Raises the psycopg error of the first statement the server refused (the transaction
        rolled back; the connection stays open and idle) or of the connection lost (it is
        closed: anything sent may have committed). At the deadline the connection is closed
        and :class:`StoreUnavailable` raised, as :meth:`PostgresConnection.within` does: what
        was sent is in doubt. A deadline already passed sends nothing (StoreUnavailable too,
        nothing in doubt).

        Cancellation: once called this cannot be cancelled: it returns or raises by its
        deadline (the shield is bounded by it; connecting is bounded by it too), and a
        pending ``Cancelled`` is raised at the caller's next checkpoint. So a write once sent
        completes or its connection is discarded, and no connection is ever left
        mid-transaction: anything but a clean end (a KeyboardInterrupt included) closes it.
        """
        if deadline is None:
            deadline = trio.current_time() + self.opener.store_timeout
        elif trio.current_time() >= deadline:
            raise self.opener.too_late()
        # One scope both shields and bounds: two cost each commit twice the time.
        with trio.CancelScope(shield=True, deadline=deadline) as bounded:
            return await self._exchange(build, deadline)
        assert bounded.cancelled_caught
        self.close()
        raise self.opener.timed_out()

    async def _exchange(self, build: Build, deadline: float) -> list[pq.abc.PGresult]:
        conn = self.opener.idle_connection()
        if conn is None:
            conn = await trio.to_thread.run_sync(
                self.opener.within, thread_deadline(deadline), PostgresConnection.connection
            )
        if conn is not self._prepared_on:
            self._prepared_on, self._prepared = conn, set()
            self._tx = Transformer(conn)
        pgconn = conn.pgconn
        clean = False
        try:
            statements = build(self)
            results, prepares = await self._pipeline(pgconn, statements)
            clean = True
        finally:
            if not clean:
                self.close()
        # A statement prepared stays prepared whatever became of the transaction.
        self._prepared.update(name for name, r in prepares if r.status == _PREPARED)
        failed = next((r for r in results if r.status != _ANSWERED), None)
        failed = next((r for _, r in prepares if r.status == _FAILED), failed)
        if failed is None:
            return results
        if pgconn.status != pq.ConnStatus.OK:
            self.close()
            raise psycopg.OperationalError(f"the connection was lost: {_message(failed)}")
        if failed.status != _FAILED:  # skipped, yet nothing before it failed
            status = pq.ExecStatus(failed.status).name
            raise psycopg.OperationalError(f"a statement was not run ({status})")
        raise _error(failed)

    async def _pipeline(
        self, pgconn: pq.abc.PGconn, statements: Sequence[Statement]
    ) -> tuple[list[pq.abc.PGresult], list[tuple[bytes, pq.abc.PGresult]]]:
        """Send ``statements`` and a Sync; their results, and those of the statements
        prepared on the way (by name)."""
        names: list[bytes | None] = []  # per result to come: a Prepare's name, or None
        pgconn.enter_pipeline_mode()
        for st in statements:
            if st.name is None or self.pooled:
                pgconn.send_query_params(st.sql, st.params)
            else:
                if st.name not in self._prepared and st.name not in names:
                    pgconn.send_prepare(st.name, st.sql)
                    names.append(st.name)
                pgconn.send_query_prepared(st.name, st.params)
            names.append(None)
        pgconn.pipeline_sync()
        await _flush(pgconn)
        results = await _read(pgconn, len(names))
        pgconn.exit_pipeline_mode()
        answers = [r for r, name in zip(results, names, strict=True) if name is None]
        prepares = [(n, r) for r, n in zip(results, names, strict=True) if n is not None]
        return answers, prepares


async def _flush(pgconn: pq.abc.PGconn) -> None:
    """Send what libpq has queued. While the socket is full, what the server answers
    meanwhile is read too, so neither side waits on the other."""
    while pgconn.flush():
        pgconn.consume_input()
        async with trio.open_nursery() as nursery:  # whichever comes first

            async def wait(ready: Callable[[int], Any]) -> None:
                await ready(pgconn.socket)
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait, trio.lowlevel.wait_writable)
            nursery.start_soon(wait, trio.lowlevel.wait_readable)


async def _read(pgconn: pq.abc.PGconn, expected: int) -> list[pq.abc.PGresult]:
    """The first result of each of ``expected`` statements sent, up to their Sync's."""
    results: list[pq.abc.PGresult] = []
    current: pq.abc.PGresult | None = None
    while True:
        while pgconn.is_busy():
            await trio.lowlevel.wait_readable(pgconn.socket)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:  # the end of one statement's results
            if current is None or len(results) == expected:
                raise psycopg.OperationalError("the pipeline's results are out of step")
            results.append(current)
            current = None
        elif result.status == _SYNC:
            if len(results) != expected:
                raise psycopg.OperationalError("the pipeline's results are out of step")
            return results
        elif pgconn.status != pq.ConnStatus.OK:
            raise psycopg.OperationalError(f"the connection was lost: {_message(result)}")
        elif current is None:
            current = result


def _message(result: pq.abc.PGresult) -> str:
    return result.get_error_message().strip()


def _error(result: pq.abc.PGresult) -> psycopg.Error:
    """The psycopg exception of a refused statement's result, by its SQLSTATE."""
    state = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode("ascii", "replace")
    try:
        cls = psycopg.errors.lookup(state)
    except KeyError:
        cls = psycopg.DatabaseError
    return cls(_message(result))
