"""sqlite3's errors, translated into trio_batch's typed ones: the only place that reads them."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

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


@contextlib.contextmanager
def translate_errors(busy_timeout: float) -> Iterator[None]:
    """Turn sqlite3 errors into :class:`StoreUnavailable`; a store call that raised one changed
    nothing (each is one transaction, rolled back)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise _unavailable(exc, busy_timeout) from exc
