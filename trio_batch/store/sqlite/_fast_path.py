"""What the SQLite store runs on the event loop's thread, and how such a call declines.

A call made on the loop thread (the fast path of
:class:`~trio_batch.store.sqlite.SQLiteJobStore`) must never wait: it is small (the limits
below), and the moment it would wait on a lock, or turns out too big, it declines having
written nothing, so that the store thread can run it again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from ..._errors import StoreUnavailable
from ..._model import Job, OutcomeWrite, Result
from .._rows import outcome_values
from .._values import Stored
from ._errors import is_lock_error, refused_by_lock
from ._store import Store, WouldBeSlow

__all__ = [
    "FAST_MAX_CONTENT",
    "FAST_MAX_META_ITEMS",
    "FAST_MAX_META_TEXT",
    "FAST_MAX_RESULTS",
    "FAST_MAX_TARGETS",
    "MISS",
    "Miss",
    "cheap_result",
    "run_unless_declined",
    "write_alone",
]

T = TypeVar("T")

#: Largest result content (characters) written on the loop thread; bigger ones go to the thread.
FAST_MAX_CONTENT = 64 * 1024
#: A result's meta is written on the loop thread only if it has at most this many items, each
#: a number, a boolean, None or a string of at most FAST_MAX_META_TEXT characters.
FAST_MAX_META_ITEMS = 32
FAST_MAX_META_TEXT = 4096
#: Largest job (targets) created on the loop thread.
FAST_MAX_TARGETS = 64
#: Largest stored results (characters, whole job) read back on the loop thread.
FAST_MAX_RESULTS = 256 * 1024


class Miss:
    """The fast path declined; nothing was done."""


MISS = Miss()


def run_unless_declined(
    fn: Callable[..., T], store: Store, args: tuple[object, ...], kwargs: dict[str, object]
) -> T | Miss:
    """``fn(store, ...)`` on a connection that never waits, or :data:`MISS` if it declined:
    the job's results are too big for the loop (:class:`WouldBeSlow`), or a lock was refused
    at ``BEGIN IMMEDIATE`` or rolled the call back. A store call is one transaction, so nothing
    was written, and the store thread can run it again."""
    try:
        return fn(store, *args, **kwargs)
    except WouldBeSlow:
        return MISS
    except StoreUnavailable as exc:
        if refused_by_lock(exc):  # the store's exits translated it; the lock is its cause
            return MISS
        raise


def cheap_result(result: Result) -> bool:
    """Cheap to encode and write on the loop: short content and a small, flat ``meta``."""
    content, meta = result.content, result.meta
    if isinstance(content, str) and len(content) > FAST_MAX_CONTENT:
        return False
    if not isinstance(meta, dict) or len(meta) > FAST_MAX_META_ITEMS:
        return False  # the thread finds out what is wrong with it, off the loop
    return not meta or all(
        value is None
        or isinstance(value, bool | int | float)
        or (isinstance(value, str) and len(value) <= FAST_MAX_META_TEXT)
        for value in meta.values()
    )


def write_alone(
    store: Store, w: OutcomeWrite, ttl: float, now: float
) -> Job | Stored | Miss | None:
    """:meth:`Store.record_write` on a connection whose lock the caller holds and that no
    transaction is open on, with none of the layers between (the keyword call, the transaction
    block, a second lock): a drain's lone write, on the loop thread, once per outcome. The same
    transaction and answer; :data:`MISS` if a lock refused it, having written nothing."""
    status, text, error, hint = outcome_values(w.result, w.error, w.hint, w.max_result_size)
    # A result stored as a failure is told with the job: its writer counted a success.
    since = w.stored_since if (error is None) == (w.error is None) else None
    conn = store.db.conn
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            answer = store._write_outcome(
                w.job_id, w.idx, status, text, error, hint, w.attempts, ttl, now, w.seen, since
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # as the transaction block: an I/O error may have ended it
                conn.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as exc:
        if is_lock_error(exc):
            return MISS
        raise
    return answer
