"""One PostgreSQL connection for the store: opening it, its bounds, and reconnecting.

One :class:`PostgresConnection` owns one connection and is used from one thread at a time (its
store thread). The connection is in autocommit mode; every operation is one transaction, and
nothing outlives it, so the connection can come from a pooler in transaction mode (PgBouncer,
RDS Proxy, a hosted service's pooled URL):

- no server-side prepared statements (``prepare_threshold=None``): a pooler hands each
  transaction to whichever server connection is free, where a statement prepared on another
  is missing, or names another client's statement;
- no session settings: each operation's bounds (``statement_timeout``, ``lock_timeout``,
  ``idle_in_transaction_session_timeout``, see :class:`Op`) are ``SET LOCAL`` in its own
  transaction, sent in the same message as its first statement;
- no session locks: advisory locks are transaction locks.

Whether a connection is pooled is told at connect (:meth:`PostgresConnection._settle`): a
direct connection prepares its frequent statements and holds its bounds as session settings,
which a direct connection keeps (without them every statement is planned again: 2-3x the
cost of a lone read or outcome write).

Every call is bounded on the client side too: a call still running at its deadline has its
socket shut down by a :class:`~._watchdog.Watchdog` and fails with :class:`StoreUnavailable`
(see :meth:`PostgresConnection.within`). A connection found dead before use (a restart while
it was idle) is replaced before the operation is sent; see :meth:`PostgresConnection._run` for
the one retry.

A connection lost is replaced at the next call, at once; if connecting fails, the next attempt
waits a short backoff (:data:`RECONNECT_BACKOFF`: 50 ms doubling to 1 s, each spread at
random, so the runners a failover cut off do not all come back in step). A call made meanwhile
waits for the attempt if its deadline allows, or fails at once saying when it is due.
"""

from __future__ import annotations

import contextlib
import enum
import math
import random
import select
import time
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import psycopg
from psycopg import pq

from ..._errors import StoreError, StoreUnavailable
from ..._retry import RetryPolicy
from ..._text import MAX_MILLISECONDS, is_finite, safe_text
from . import _queries as q
from ._errors import connection_lost, translate_errors, unavailable
from ._schema import migrate
from ._watchdog import Watchdog, shut_socket

__all__ = [
    "Conn",
    "Op",
    "PostgresConnection",
    "pooled",
    "rollback",
    "safe_location",
    "usable",
]

P = ParamSpec("P")
T = TypeVar("T")

Conn = psycopg.Connection[Any]

#: The default client-side bound on one store call, in seconds (``Config.store_timeout``).
DEFAULT_STORE_TIMEOUT = 5.0
#: psycopg's default: a statement run this often on a direct connection is prepared.
_DIRECT_PREPARE_THRESHOLD = 5
#: A schema migration's bounds: it waits for every session's locks on the tables it alters.
MIGRATE_TIMEOUT = 60.0
#: The wait before another attempt to connect, after ``n`` failed in a row: 50 ms doubling to
#: 1 s, spread by +-50%. The first attempt after a loss is made at once.
RECONNECT_BACKOFF = RetryPolicy(first_delay=0.05, max_delay=1.0, multiplier=2.0, jitter=0.5)


class Op(enum.Enum):
    """The kinds of operation, each with its server-side bounds (``store_timeout`` = T):

    - ``READ``: ``statement_timeout`` T, ``lock_timeout`` T (a read waits only on DDL);
    - ``WRITE``: ``statement_timeout`` T, ``lock_timeout`` T/2: a write that waits on a row or
      advisory lock (the creation lock, a job another runner is writing) gives up at half,
      as "lock held", while its caller still waits for the answer;
    - ``MIGRATE``: both :data:`MIGRATE_TIMEOUT`.

    Every transaction also has ``idle_in_transaction_session_timeout`` T: the server ends the
    transaction of a client that stopped mid-way (SIGSTOP, a partition), freeing its locks.
    """

    READ = "read"
    WRITE = "write"
    MIGRATE = "migrate"


def safe_location(conninfo: str) -> str:
    """``conninfo`` without its password, for messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"not a PostgreSQL connection string or URL: {exc}") from None
    params.pop("password", None)
    return "PostgreSQL " + psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})


def _millis(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def connect_options(
    conninfo: str, *, store_timeout: float, connect_timeout: float
) -> dict[str, Any]:
    """libpq options bounding a connection: connect timeout, TCP keepalives and
    ``tcp_user_timeout`` (libpq ignores the TCP ones on a Unix socket). Options already in
    ``conninfo`` win."""
    options: dict[str, Any] = {
        # libpq takes whole seconds and treats 1 as 2.
        "connect_timeout": max(2, math.ceil(connect_timeout)),
        # An idle connection to a peer gone without a word is found dead within about
        # 2 x store_timeout; data left unacknowledged for store_timeout cuts it.
        "keepalives": 1,
        "keepalives_idle": max(1, math.ceil(store_timeout)),
        "keepalives_interval": max(1, math.ceil(store_timeout / 3)),
        "keepalives_count": 3,
        "tcp_user_timeout": _millis(store_timeout),
    }
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    return {k: v for k, v in options.items() if k not in given}


class PostgresConnection:
    """The store's connection; :class:`~trio_batch.store.postgres.PostgresStore` adds the
    operations. ``runner_id`` is the runner this connection writes for (None: no runner).

    ``store_timeout`` bounds each call (client side, :meth:`within`) and sets the server-side
    bounds of each kind of operation (:class:`Op`); ``connect_timeout`` (default
    ``store_timeout``) bounds a connection attempt.
    """

    #: How many ``SET LOCAL`` statements come before an operation's statement (see _one).
    _SETTINGS = 2

    def __init__(
        self,
        conninfo: str,
        *,
        store_timeout: float = DEFAULT_STORE_TIMEOUT,
        connect_timeout: float | None = None,
    ) -> None:
        # Sent on in milliseconds, which PostgreSQL takes up to 2**31 - 1: past it, the
        # server refused the first statement and the open read as an outage.
        for name, seconds in (
            ("store_timeout", store_timeout),
            ("connect_timeout", connect_timeout),
        ):
            if seconds is not None and not (is_finite(seconds) and 0 < seconds <= MAX_MILLISECONDS):
                raise ValueError(
                    f"{name} must be a positive number of seconds up to {MAX_MILLISECONDS:g}, "
                    f"not {safe_text(seconds, 40)}"
                )
        self.conninfo = conninfo
        self.location = safe_location(conninfo)
        self.store_timeout = store_timeout
        self.connect_timeout = store_timeout if connect_timeout is None else connect_timeout
        self._options = connect_options(
            conninfo, store_timeout=store_timeout, connect_timeout=self.connect_timeout
        )
        self.runner_id: str | None = None
        self._conn: Conn | None = None
        # (job_id, idx) of outcome writes whose commit was cut off: they may have committed.
        self._maybe_committed: set[tuple[str, int]] = set()
        # Whether the operation under way has sent a statement that may write.
        self._sent_write = False
        self._cut_while_connecting = False
        self._was_cut: Callable[[], bool] = lambda: False
        self._deadline: float | None = None  # the deadline of the call under way (within)
        # Polled at a quarter of the timeout: a cut comes at most that late.
        self.watchdog = Watchdog(
            self._cut, poll=store_timeout / 4, name="trio_batch postgres watchdog"
        )
        self._set_local = {op: self._settings(op) for op in Op}
        self._session_settings = self._set_local[Op.WRITE].replace("SET LOCAL", "SET") + (
            f"SET idle_in_transaction_session_timeout = {_millis(store_timeout)}"
        )
        #: Whether the connection goes through a pooler (None: not connected yet).
        self.pooled: bool | None = None
        # Connecting: attempts failed in a row, and when (clock) the next one is due.
        self.connect_failures = 0
        self._connect_due = -math.inf
        self._rng = random.Random()
        #: The clock and the sleep of the reconnect backoff (a test's may replace them).
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], None] = time.sleep

    def _bounds(self, op: Op) -> tuple[int, int]:
        """``op``'s ``statement_timeout`` and ``lock_timeout``, in milliseconds."""
        if op is Op.MIGRATE:
            statement = lock = MIGRATE_TIMEOUT
        else:
            statement = self.store_timeout
            lock = self.store_timeout if op is Op.READ else self.store_timeout / 2
        return _millis(statement), _millis(lock)

    def _settings(self, op: Op) -> str:
        """The ``SET LOCAL`` statements of ``op``'s bounds, as SQL (integers of our own)."""
        statement, lock = self._bounds(op)
        return f"SET LOCAL statement_timeout = {statement}; SET LOCAL lock_timeout = {lock}; "

    @classmethod
    def open(
        cls,
        conninfo: str,
        *,
        store_timeout: float = DEFAULT_STORE_TIMEOUT,
        connect_timeout: float | None = None,
    ) -> Self:
        """Connect to ``conninfo`` (a URL or libpq keywords) and create or migrate the schema.

        Raises :class:`StoreError` if the server cannot be reached or refuses us, and
        :class:`SchemaVersionError` for a newer or foreign schema.
        """
        store = cls(conninfo, store_timeout=store_timeout, connect_timeout=connect_timeout)
        deadline = time.monotonic() + store.connect_timeout + 2 * MIGRATE_TIMEOUT
        try:
            store.within(deadline, cls._migrate)
        except (psycopg.Error, StoreUnavailable) as exc:
            store.close(final=True)
            raise StoreError(f"cannot open {store.location} as a trio_batch store: {exc}") from exc
        except BaseException:
            store.close(final=True)
            raise
        return store

    def _migrate(self) -> None:
        conn = self.connection()
        migrate(conn, self.location, lambda: self._tx(conn, Op.MIGRATE))

    # ----------------------------------------------------------------------------------------
    # The connection

    def connection(self) -> Conn:
        """The open connection; a new one if there is none or the one held is dead.

        Raises :class:`StoreUnavailable` (psycopg's error its cause) if no new one can be
        made: the server cannot be reached, refuses us, or the call's deadline passed.
        """
        conn = self.idle_connection()
        if conn is not None:
            return conn
        self._wait_for_backoff()
        with translate_errors(self.store_timeout):
            try:
                conn = self._connect()
            except psycopg.Error:
                self.connect_failures += 1
                delay = RECONNECT_BACKOFF.delay(self.connect_failures, rng=self._rng)
                self._connect_due = self.clock() + delay
                raise
        self.connect_failures = 0
        return conn

    def _wait_for_backoff(self) -> None:
        """Wait until the next attempt to connect is due (see :data:`RECONNECT_BACKOFF`);
        :class:`StoreUnavailable` at once if that is past the deadline of the call under
        way."""
        wait = self._connect_due - self.clock()
        if wait <= 0:
            return
        if self._deadline is not None and wait >= self._deadline - time.monotonic():
            raise StoreUnavailable(
                f"{self.location} refused the last {self.connect_failures} attempts to "
                f"connect; the next is due in {wait:.2f} s, past this call's deadline "
                f"(store_timeout {self.store_timeout:g} s); try again shortly"
            )
        self.sleep(wait)

    def _connect(self) -> Conn:
        """A new connection, settled (see :meth:`_settle`) and held."""
        conn = psycopg.connect(
            self.conninfo,
            autocommit=True,
            prepare_threshold=None,
            application_name="trio_batch",
            **self._connect_options(),
        )
        with self.watchdog.lock:
            cut, self._cut_while_connecting = self._cut_while_connecting, False
            if not cut:
                self._conn = conn  # held while it settles: the watchdog can cut that too
        if cut:
            conn.close()
            raise psycopg.OperationalError("store_timeout passed while connecting")
        try:
            self._settle(conn)
        except BaseException:
            self.close()
            raise
        return conn

    def _connect_options(self) -> dict[str, Any]:
        """The options of a connection attempt: inside :meth:`within`, a connect timeout of
        the call's time left if that is less (libpq's whole seconds, at least 2), so that
        connecting late in a call does not take a whole connect_timeout past its deadline."""
        deadline, ours = self._deadline, self._options.get("connect_timeout")
        if deadline is None or ours is None:
            return self._options
        left = max(2, math.ceil(deadline - time.monotonic()))
        return self._options if left >= ours else {**self._options, "connect_timeout": left}

    @property
    def is_open(self) -> bool:
        """Whether a connection is held (it may have died since its last answer)."""
        return self._conn is not None

    def idle_connection(self) -> Conn | None:
        """The open connection if it is still usable (see :func:`usable`); None if there is
        none, or if it died while idle (a restart, a pooler that dropped it): it is closed."""
        conn = self._conn
        if conn is not None and not usable(conn):
            self.close()
            conn = None
        return conn

    def _settle(self, conn: Conn) -> None:
        """Tell a pooled connection from a direct one, and set a direct one up for speed.

        A pooler answers the connection's start with a backend key of its own (it must, to
        route a cancel), so the server process id libpq was given is not the one serving the
        statement. A direct connection prepares its frequent statements (the default psycopg
        threshold) and takes the WRITE bounds as session settings, so a lone statement goes
        without its ``SET LOCAL`` prefix; a pooled one keeps neither.
        """
        row = conn.execute(q.BACKEND_PID, prepare=False).fetchone()
        self.pooled = pooled(conn, None if row is None else row[0])
        if not self.pooled:
            conn.execute(self._session_settings, prepare=False)
            conn.prepare_threshold = _DIRECT_PREPARE_THRESHOLD

    def close(self, *, final: bool = False) -> None:
        """Close the connection; a later call would open a new one (``final``: and stop the
        watchdog's thread, for good)."""
        with self.watchdog.lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        if final:
            self.watchdog.close()

    def _cut(self) -> None:
        """The watchdog's: shut the socket of the call past its deadline (under its lock)."""
        conn = self._conn
        if conn is None or conn.closed:
            self._cut_while_connecting = True
        else:
            shut_socket(conn.pgconn.socket)

    # ----------------------------------------------------------------------------------------
    # Running operations

    def within(
        self,
        deadline: float,
        fn: Callable[Concatenate[Self, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(self, ...)``, cut off at ``deadline`` (``time.monotonic()``): then
        :class:`StoreUnavailable` with a hint, and the connection is dropped. A psycopg error
        that ``fn`` raises comes out as :class:`StoreUnavailable` too (its cause).

        A call whose deadline passed before it started (queued behind a call that hung) is not
        made at all. One cut off mid-way may have taken effect, as with any lost connection:
        see each operation for what a retry does.
        """
        if time.monotonic() >= deadline:
            raise self.too_late()
        self._cut_while_connecting = False
        with self.watchdog.guard(deadline) as cut:
            self._was_cut, self._deadline = cut, deadline
            try:
                return fn(self, *args, **kwargs)
            except (psycopg.Error, StoreUnavailable) as exc:  # an operation's, or plumbing's
                if cut():
                    self.close()
                    raise self.timed_out() from exc
                if isinstance(exc, psycopg.Error):
                    raise unavailable(exc, self.store_timeout) from exc
                raise
            finally:
                self._deadline = None

    def too_late(self) -> StoreUnavailable:
        """The error of a call not made: its deadline passed before it could start."""
        return StoreUnavailable(
            f"the call waited store_timeout ({self.store_timeout:g} s) behind earlier calls "
            f"(or steps of its own) to {self.location} that got no answer in time, and was "
            "not made; try again shortly"
        )

    def timed_out(self) -> StoreUnavailable:
        """The error of a call cut off at its deadline, its connection dropped."""
        return StoreUnavailable(
            f"{self.location} did not answer within store_timeout "
            f"({self.store_timeout:g} s), so the connection was dropped: the network "
            "or the database is down, overloaded, or a lock is held; try again shortly"
        )

    def _run(self, fn: Callable[[Conn], T], *, op: Op = Op.WRITE) -> T:
        """``fn(connection)``: one operation. A psycopg error that means the connection is gone
        drops it, so the next call reconnects.

        Retried once on a fresh connection (the caller sees no error) only when it cannot have
        taken effect: a read (``op`` READ), or an operation lost before it sent anything that
        writes (its reads, or the ``BEGIN`` of its transaction). Any other lost connection is
        the caller's to handle: the operation may have committed. A psycopg error comes out as
        :class:`StoreUnavailable` (its cause): every operation, called sync or through the
        async face, raises only trio_batch's errors.
        """
        try:
            for attempt in (1, 2):
                self._sent_write = False
                conn = self.connection()
                try:
                    return fn(conn)
                except psycopg.Error as exc:
                    if not connection_lost(exc, conn):
                        raise
                    self.close()  # reopened at the next call
                    safe = op is Op.READ or not self._sent_write
                    if attempt == 2 or not safe or self._was_cut():  # no time left to retry in
                        raise
        except psycopg.Error as exc:
            raise unavailable(exc, self.store_timeout) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _one(self, conn: Conn, op: Op, sql: str, params: Any = None) -> psycopg.Cursor[Any]:
        """Run ``sql`` as a transaction of its own with ``op``'s bounds, in one round trip: one
        simple-protocol message ``SET LOCAL ...; SET LOCAL ...; sql`` (an implicit transaction,
        so the settings end with it), parameters bound on the client. The cursor is on the
        statement's result.

        A write counts as sent before it goes out: once any of it is on the wire, a lost
        connection leaves it in doubt (never retried by _run)."""
        if op is not Op.READ:
            self._sent_write = True
        if not self.pooled:  # the session's settings bound it: a prepared statement
            return conn.execute(sql, params)
        cur = psycopg.ClientCursor(conn)
        cur.execute(self._set_local[op] + sql, params)
        for _ in range(self._SETTINGS):
            cur.nextset()
        return cur

    @contextlib.contextmanager
    def _tx(self, conn: Conn, op: Op, *, snapshot: bool = False) -> Iterator[Conn]:
        """A transaction with ``op``'s bounds (``snapshot``: one REPEATABLE READ, READ ONLY
        snapshot): ``BEGIN`` and the settings in one message, ``COMMIT`` at the end, and
        ``ROLLBACK`` if the block raises."""
        begin = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; " if snapshot else "BEGIN; "
        idle = f"SET LOCAL idle_in_transaction_session_timeout = {_millis(self.store_timeout)}"
        conn.execute(begin + self._set_local[op] + idle, prepare=False)
        self._sent_write = op is not Op.READ  # what follows may write
        try:
            yield conn
        except BaseException:
            rollback(conn)
            raise
        conn.execute("COMMIT", prepare=False)


def pooled(conn: Conn, server_pid: int | None) -> bool:
    """Whether ``conn`` goes through a pooler, given the ``pg_backend_pid()`` it answered
    (None: no answer). A pooler answers a connection's start with a backend key of its own
    (it must, to route a cancel), so the process id libpq was given is not the server's."""
    return server_pid is None or server_pid != conn.info.backend_pid


def usable(conn: Conn) -> bool:
    """Whether an idle connection is still open: nothing has arrived on it since its last
    answer (a server going down sends its FATAL message and closes the socket)."""
    if conn.closed or conn.broken or conn.info.transaction_status != pq.TransactionStatus.IDLE:
        return False
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return False
    return not readable


def rollback(conn: Conn) -> None:
    """End the failed transaction; a connection that cannot is closed (and so reopened)."""
    if conn.closed or conn.broken:
        return
    if conn.info.transaction_status == pq.TransactionStatus.IDLE:
        return
    try:
        conn.execute("ROLLBACK", prepare=False)
    except psycopg.Error:
        conn.close()
