"""One SQLite connection, configured for the store: pragmas, transactions, checkpoints.

Concurrency model
-----------------
A store owns **one** connection, opened with ``check_same_thread=False``, and a re-entrant
lock. Every public method takes the lock for its whole duration, so a store may be called from
any thread (one call at a time runs; the others wait for the lock). Several processes, or
several store objects on the same file, coordinate through SQLite's own file locks: every
read-then-write runs under ``BEGIN IMMEDIATE``, which waits up to the busy timeout for the
write lock instead of failing half-way.

Durability
----------
File databases use WAL. With ``synchronous="NORMAL"`` (the default) a committed transaction is
never lost when the *process* crashes, but the last commits may be lost on power loss or an OS
crash; ``synchronous="FULL"`` is the power-safe choice, at several times the cost per commit.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from typing import Self

from sqlite_utils import Database

from ..._errors import StoreError
from ..._text import MAX_MILLISECONDS, check_seconds
from ._errors import translated
from ._schema import check, migrate

__all__ = ["Connection"]

#: Bytes the WAL file is cut back to whenever a checkpoint restarts it.
WAL_SIZE_LIMIT = 16 * 1024 * 1024


class Connection:
    """The store's connection and its lock; :class:`~trio_batch.Store` adds the operations."""

    def __init__(
        self,
        db: Database,
        *,
        path: str,
        synchronous: str = "NORMAL",
        busy_timeout: float = 5.0,
    ) -> None:
        """Wrap an already configured database; most code wants :meth:`Store.open` instead."""
        self.db = db
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        #: True while a runner is using this Store object (see ``open_runner``).
        self.runner_active = False
        self._lock = threading.RLock()

    # ----------------------------------------------------------------------------------------
    # Opening and closing

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] = ":memory:",
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 5.0,
        wal_autocheckpoint: bool = True,
        create: bool = True,
    ) -> Self:
        """Open or create the database at ``path`` (``":memory:"`` for a private in-memory one).

        File databases are switched to WAL. ``synchronous`` is ``"NORMAL"`` (never loses a
        commit on a process crash, may on power loss) or ``"FULL"`` (power-safe, slower).
        ``busy_timeout`` is how many seconds a write waits for another connection's lock before
        failing with "database is locked". Foreign keys are on. The schema is created, or
        migrated, idempotently; a database written by a newer schema version, or one that is
        not a trio_batch database, raises :class:`SchemaVersionError` and is left untouched.

        ``wal_autocheckpoint=False`` turns off SQLite's automatic WAL checkpoints on this
        connection, for a connection whose commits must never wait on a checkpoint's disk
        flush; something else must then checkpoint (see :meth:`checkpoint`).

        ``create=False`` opens only a file that exists: a path with no file raises
        :class:`StoreError` rather than creating an empty database there.
        """
        sync = synchronous.upper()
        if sync not in ("NORMAL", "FULL", "EXTRA"):
            raise ValueError(
                f"synchronous must be 'NORMAL', 'FULL' or 'EXTRA', not {synchronous!r}"
            )
        # sqlite3 hands it on as a C int of milliseconds: NaN, an infinity or past 2**31 - 1 ms
        # became no wait at all, and an int past any float raised OverflowError.
        check_seconds("busy_timeout", busy_timeout, high=MAX_MILLISECONDS)
        path = os.fspath(path)
        target, uri = path, False
        if not create and path != ":memory:":
            target, uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=rw", True
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
            conn = sqlite3.connect(
                target, timeout=busy_timeout, check_same_thread=False, isolation_level=None, uri=uri
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the database {path!r}: {exc}") from exc
        try:
            db = Database(conn, execute_plugins=False)
            # Refuse before the first pragma: journal_mode=WAL is written into the file, and a
            # refused database is left as it was. migrate() checks again under the write lock.
            check(db, path)
            if path != ":memory:" and not path.startswith("file::memory:"):
                db.execute("PRAGMA journal_mode=WAL")  # see is_memory
                # After a checkpoint restarts the WAL, cut the file back to this size.
                db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT:d}")
            db.execute(f"PRAGMA synchronous={sync}")  # validated above: one of three words
            db.execute("PRAGMA foreign_keys=ON")
            if not wal_autocheckpoint:
                db.execute("PRAGMA wal_autocheckpoint=0")
            store = cls(db, path=path, synchronous=sync, busy_timeout=busy_timeout)
            migrate(store)
        except sqlite3.Error as exc:  # corrupt, not a database, read-only, locked past the timeout
            conn.close()
            raise StoreError(f"cannot open {path!r} as a trio_batch database: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return store

    @property
    def is_memory(self) -> bool:
        """True for a private in-memory database (one connection only; nothing to reopen)."""
        return self.path == ":memory:" or self.path.startswith("file::memory:")

    def reopen(self, *, busy_timeout: float | None = None, wal_autocheckpoint: bool = True) -> Self:
        """Open another connection to the same database file, with this store's settings.

        Raises ValueError for an in-memory database, which has no file to reopen, and
        :class:`StoreError` if the file is gone (deleted under the store: a new, empty
        database there would split the jobs between two files).
        """
        if self.is_memory:
            raise ValueError("an in-memory database cannot be reopened")
        return type(self).open(
            self.path,
            synchronous=self.synchronous,
            busy_timeout=self.busy_timeout if busy_timeout is None else busy_timeout,
            wal_autocheckpoint=wal_autocheckpoint,
            create=False,
        )

    def checkpoint(self, mode: str = "TRUNCATE") -> None:
        """Copy the WAL's committed pages into the database file, and restart the WAL.

        ``TRUNCATE`` (the default) takes the write lock, copies everything, and empties the
        WAL file, so it cannot grow without end under a steady stream of commits; it waits up
        to the busy timeout for other connections' readers and writers. ``RESTART`` does the
        same but keeps the file's size (up to the journal size limit) for the next writes to
        reuse. ``PASSIVE`` never waits, but under constant writes it may never get to restart
        the WAL.
        """
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        with self._locked():
            if not self.is_memory:
                self.db.execute(f"PRAGMA wal_checkpoint({mode})")  # one of four words

    def close(self) -> None:
        """Close the connection. The store cannot be used afterwards."""
        with self._locked():
            self.db.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------------
    # Transactions

    def transaction(self) -> _Transaction:
        """Hold the store's lock and run the block in one ``BEGIN IMMEDIATE`` transaction.

        Commits when the block ends, rolls back if it raises. ``BEGIN IMMEDIATE`` takes the
        write lock up front, so a read-then-write block can never fail half-way on
        "database is locked": it waits up to the busy timeout, or fails before doing anything.
        Nested use runs the block in a savepoint of the outer transaction, so it stays atomic on
        its own: if it raises, only its own changes are rolled back. The block gets the
        ``Database``. A ``sqlite3`` error leaves it translated (see :mod:`._errors`).
        """
        return _Transaction(self)

    def _snapshot(self) -> _Snapshot:
        """Hold the store's lock and read inside one read transaction: one snapshot throughout.

        Inside a transaction already, that transaction is the snapshot.
        """
        return _Snapshot(self)

    def _locked(self) -> _Held:
        """Hold the store's lock for the block, beginning nothing: a call of one statement,
        or of several, each of which begins its own transaction."""
        return _Held(self)


class _Locked:
    """A block that holds the store's lock, and begins what it must once it holds it.

    The one exit of every store call: sqlite3's errors that reach it, from the block or from
    ending it, leave as trio_batch's (:func:`~._errors.translated`), with the original as
    ``__cause__``. Classes rather than ``@contextmanager`` generators: they wrap every outcome
    write and status read, and a generator costs several microseconds more.
    """

    __slots__ = ("_flag", "_store")

    def __init__(self, store: Connection) -> None:
        self._store = store
        self._flag = False

    def _lock_and_begin(self) -> None:
        store = self._store
        store._lock.acquire()
        try:
            self._flag = self._begin(store.db.conn)  # straight to sqlite3
        except BaseException as exc:
            store._lock.release()
            if isinstance(exc, sqlite3.Error):
                raise translated(exc, store.busy_timeout) from exc
            raise

    def _begin(self, conn: sqlite3.Connection) -> bool:
        raise NotImplementedError

    def _end(self, conn: sqlite3.Connection, failed: bool) -> None:
        raise NotImplementedError

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        store = self._store
        try:
            self._end(store.db.conn, exc_type is not None)
        except sqlite3.Error as ended:
            raise translated(ended, store.busy_timeout) from ended
        finally:
            store._lock.release()
        if isinstance(exc, sqlite3.Error):
            raise translated(exc, store.busy_timeout) from exc


class _Held(_Locked):
    """The context manager :meth:`Connection._locked` returns: the lock, nothing begun."""

    __slots__ = ()

    def __enter__(self) -> None:
        self._store._lock.acquire()

    def _end(self, conn: sqlite3.Connection, failed: bool) -> None:
        return None


class _Snapshot(_Locked):
    """The context manager :meth:`Connection._snapshot` returns."""

    __slots__ = ()

    def _begin(self, conn: sqlite3.Connection) -> bool:
        """Begin a read transaction unless one is open; True if this block owns it."""
        own = not conn.in_transaction
        if own:
            conn.execute("BEGIN")
        return own

    def __enter__(self) -> None:
        self._lock_and_begin()

    def _end(self, conn: sqlite3.Connection, failed: bool) -> None:
        # As in transaction(): an I/O error may have rolled the transaction back already,
        # and a COMMIT then would hide that error behind its own.
        if self._flag and conn.in_transaction:
            conn.execute("COMMIT")


class _Transaction(_Locked):
    """The context manager :meth:`Connection.transaction` returns."""

    __slots__ = ()

    def _begin(self, conn: sqlite3.Connection) -> bool:
        """Begin the write transaction, or a savepoint inside one; True for a savepoint."""
        nested = conn.in_transaction
        conn.execute("SAVEPOINT nested" if nested else "BEGIN IMMEDIATE")
        return nested

    def __enter__(self) -> Database:
        self._lock_and_begin()
        return self._store.db

    def _end(self, conn: sqlite3.Connection, failed: bool) -> None:
        if self._flag:  # nested: a savepoint
            if not failed:
                conn.execute("RELEASE nested")
            elif conn.in_transaction:
                conn.execute("ROLLBACK TO nested")
                conn.execute("RELEASE nested")
            # Else some error (a full disk, I/O) made SQLite roll back the whole
            # transaction, savepoint and all: there is nothing left to undo here.
        elif failed:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        else:
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
