"""sqlite3's errors, translated into trio_batch's typed ones: the only place that reads them.

The store's lock (see :mod:`._connection`) is held through every public call of the
:class:`~trio_batch.Store`, and its exits translate what escapes them with :func:`translated`;
:class:`translate_errors` does the same around the :class:`~trio_batch.JobStore`'s calls.
"""

from __future__ import annotations

import sqlite3

from ..._errors import StoreError, StoreUnavailable

__all__ = ["is_lock_error", "refused_by_lock", "translate_errors", "translated"]


def is_lock_error(exc: sqlite3.Error) -> bool:
    """True if another connection held a lock (SQLITE_BUSY / SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def refused_by_lock(exc: StoreError) -> bool:
    """True if ``exc`` was translated from a lock held by another connection: the call was
    refused at the lock, having written nothing."""
    cause = exc.__cause__
    return isinstance(cause, sqlite3.Error) and is_lock_error(cause)


#: What the primary result codes that can reach a caller mean, said plainly.
_WHY = {
    sqlite3.SQLITE_FULL: "the disk or the database is full",
    sqlite3.SQLITE_IOERR: "the disk reported an I/O error",
    sqlite3.SQLITE_READONLY: "the database cannot be written (a read-only file or directory)",
    sqlite3.SQLITE_CANTOPEN: "the database file cannot be opened",
    sqlite3.SQLITE_CORRUPT: "the database file is damaged",
    sqlite3.SQLITE_NOTADB: "the database file is not a database",
}


def translated(exc: sqlite3.Error, busy_timeout: float) -> StoreError:
    """The typed error for a database that refused a call, to raise ``from exc``:
    :class:`StoreUnavailable` (saying why), or :class:`StoreError` for a closed store."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if is_lock_error(exc):
        why = (
            "another connection or process held the database lock for longer than the busy "
            f"timeout ({busy_timeout:g} s)"
        )
    elif isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
        return StoreError(f"the store is closed; it answers no more calls: {exc}")
    else:
        why = _WHY.get(code, "the database refused the operation")
    return StoreUnavailable(f"{why}: {exc}")


class translate_errors:  # lower case: used like a function, ``with translate_errors(t):``
    """Turn sqlite3 errors into :class:`StoreUnavailable` (see :func:`translated`); a store
    call that raised one changed nothing (each is one transaction, rolled back).

    A class rather than a ``@contextmanager`` generator: it wraps every outcome write.
    """

    __slots__ = ("_busy_timeout",)

    def __init__(self, busy_timeout: float) -> None:
        self._busy_timeout = busy_timeout

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, sqlite3.Error):
            raise translated(exc, self._busy_timeout) from exc
