"""sqlite3's errors, translated into trio_batch's typed ones: the only place that reads them."""

from __future__ import annotations

import sqlite3

from ..._errors import StoreUnavailable

__all__ = ["is_lock_error", "translate_errors"]


def is_lock_error(exc: sqlite3.Error) -> bool:
    """True if another connection held a lock (SQLITE_BUSY / SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _unavailable(exc: sqlite3.Error, busy_timeout: float) -> StoreUnavailable:
    """A clear, typed error for a database that refused a call."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if is_lock_error(exc):
        why = (
            "another connection or process held the database lock for longer than the busy "
            f"timeout ({busy_timeout:g} s)"
        )
    elif code == sqlite3.SQLITE_FULL:
        why = "the disk or the database is full"
    elif code == sqlite3.SQLITE_IOERR:
        why = "the disk reported an I/O error"
    else:
        why = "the database refused the operation"
    return StoreUnavailable(f"{why}: {exc}")


class translate_errors:  # lower case: used like a function, ``with translate_errors(t):``
    """Turn sqlite3 errors into :class:`StoreUnavailable`; a store call that raised one changed
    nothing (each is one transaction, rolled back).

    A class rather than a ``@contextmanager`` generator: it wraps every outcome write.
    """

    __slots__ = ("_busy_timeout",)

    def __init__(self, busy_timeout: float) -> None:
        self._busy_timeout = busy_timeout

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, sqlite3.Error):
            raise _unavailable(exc, self._busy_timeout) from exc
