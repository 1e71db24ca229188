"""How the runner reaches the store without ever making the event loop wait on SQLite.

Two paths:

- **The fast path**, on the loop thread, for a small call that cannot wait: a second connection
  to the same file with a busy timeout of 0 and automatic WAL checkpoints off. Under
  ``synchronous=NORMAL`` a WAL commit only appends to the WAL file (no fsync), so such a call
  costs tens of microseconds. The moment it would wait, because another connection or process
  holds the write lock (SQLite answers "database is locked" at once, at ``BEGIN IMMEDIATE``,
  before anything is written) or the in-process connection is busy, it gives up and the call
  goes to the store thread instead.
- **The store thread** (:class:`StoreThread`) for everything else: calls that may wait on a
  lock or a disk flush (``synchronous=FULL``), big results, purges and checkpoints.

Outcome writes are grouped: drain tasks whose outcomes are ready at the same moment share one
transaction (each write atomic in its own savepoint), so several jobs cost one commit. Each
drain task still waits for its own outcome to be committed before fetching its next target.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import trio

from ._model import Job, Result, RunnerClosed, StoreUnavailable, Target, TargetStatus
from ._store import OutcomeWrite, Store, WouldBlock
from ._store_thread import StoreThread

P = ParamSpec("P")
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
#: Fast-path calls between two WAL checkpoints run on the store thread. The fast connection
#: never checkpoints (that would wait on a disk flush on the loop thread), so this bounds the
#: WAL: about 1000 commits of a few pages each, some MB.
CHECKPOINT_EVERY = 1000


class _Miss:
    """The fast path declined; nothing was done."""


_MISS = _Miss()


def _is_lock_error(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _unavailable(exc: sqlite3.Error, store: Store) -> StoreUnavailable:
    """A clear, typed error for a database that refused a call."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if _is_lock_error(exc):
        why = (
            "another connection or process held the database lock for longer than the busy "
            f"timeout ({store.busy_timeout:g} s)"
        )
    elif code == sqlite3.SQLITE_FULL:
        why = "the disk or the database is full"
    elif code == sqlite3.SQLITE_IOERR:
        why = "the disk reported an I/O error"
    else:
        why = "the database refused the operation"
    return StoreUnavailable(f"{why}: {exc}")


@contextlib.contextmanager
def _store_errors(store: Store) -> Iterator[None]:
    """Turn sqlite3 errors into :class:`StoreUnavailable`; nothing was changed by the call."""
    try:
        yield
    except sqlite3.Error as exc:
        raise _unavailable(exc, store) from exc


def _small(result: Result) -> bool:
    """Cheap to encode and write on the loop: short content and a small, flat ``meta``."""
    content, meta = result.content, result.meta
    if isinstance(content, str) and len(content) > FAST_MAX_CONTENT:
        return False
    if not isinstance(meta, dict) or len(meta) > FAST_MAX_META_ITEMS:
        return False  # the thread finds out what is wrong with it, off the loop
    return all(
        value is None
        or isinstance(value, bool | int | float)
        or (isinstance(value, str) and len(value) <= FAST_MAX_META_TEXT)
        for value in meta.values()
    )


@dataclass(eq=False, slots=True)
class _PendingWrite:
    write: OutcomeWrite
    task: trio.lowlevel.Task | None = None  # a follower waiting for the leader's commit
    answer: Job | Exception | None = None


class StoreAccess:
    """The runner's way to the store: the fast path when it cannot block, else the thread.

    Create inside a trio run, :meth:`start`, and :meth:`close` when no call is pending.
    """

    def __init__(
        self, store: Store, *, on_write: Callable[[str, float], None] | None = None
    ) -> None:
        self.store = store
        #: Called with ``(operation, seconds)`` after each job creation and outcome commit.
        self.on_write = on_write
        self.thread = StoreThread()
        self._fast: Store | None = None
        self._owns_fast = False
        self._batch: list[_PendingWrite] = []
        self._commits_since_checkpoint = 0
        self._checkpoint_pending = False

    def start(self) -> None:
        """Start the store thread and open the fast-path connection where one is safe."""
        # Only NORMAL: under FULL every commit waits for a disk flush, which the loop must not.
        if self.store.synchronous == "NORMAL":
            if self.store.is_memory:
                self._fast = self.store  # one connection; its lock says when the thread has it
            else:
                self._fast = self.store.reopen(busy_timeout=0, wal_autocheckpoint=False)
                self._owns_fast = True
        self.thread.start()

    def _check_open(self) -> None:
        if self.thread.stopped:
            raise RunnerClosed("the runner has stopped; its store answers no more calls")

    def close(self) -> None:
        """Close the fast-path connection and let the thread end after its queued calls."""
        if self._owns_fast and self._fast is not None:
            self._fast.close()
        self._fast = None
        self.thread.stop()

    # ----------------------------------------------------------------------------------------

    async def call(
        self,
        fn: Callable[Concatenate[Store, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(store, *args, **kwargs)``: on the fast path if it can run there, else the thread.

        Cancellation: as :meth:`StoreThread.run`: once started, the call completes, and
        ``Cancelled`` is raised at the caller's next checkpoint.
        """
        self._check_open()
        with _store_errors(self.store):
            result = self._try_fast(fn, *args, **kwargs)
            if isinstance(result, _Miss):
                return await self.thread.run(fn, self.store, *args, **kwargs)
        await trio.lowlevel.cancel_shielded_checkpoint()  # an async call always yields once
        return result

    async def call_on_thread(
        self,
        fn: Callable[Concatenate[Store, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(store, *args, **kwargs)`` on the store thread, whatever it is."""
        self._check_open()
        with _store_errors(self.store):
            return await self.thread.run(fn, self.store, *args, **kwargs)

    async def create_job(
        self, caller: str, caller_class: str, targets: Sequence[Target], **kwargs: Any
    ) -> tuple[Job, bool]:
        """:meth:`Store.create_job`; on the fast path when the job is small."""
        call = self.call if len(targets) <= FAST_MAX_TARGETS else self.call_on_thread
        start = time.perf_counter()
        answer = await call(Store.create_job, caller, caller_class, targets, **kwargs)
        self._observe("create_job", start)
        return answer

    def _observe(self, operation: str, start: float) -> None:
        if self.on_write is not None:
            # An observer's bug must not fail a write that succeeded.
            with contextlib.suppress(Exception):
                self.on_write(operation, time.perf_counter() - start)

    async def get_status(self, job_id: str, *, now: float) -> tuple[Job, list[TargetStatus]] | None:
        """:meth:`Store.get_status`; on the fast path unless the job holds big results."""
        self._check_open()
        with _store_errors(self.store):
            result = self._try_fast(
                Store.get_status, job_id, now=now, max_results_size=FAST_MAX_RESULTS
            )
        if isinstance(result, _Miss):
            return await self.call_on_thread(Store.get_status, job_id, now=now)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return result

    async def record_outcome(self, write: OutcomeWrite, *, ttl: float, now: float) -> Job | None:
        """Store one outcome, sharing a commit with the outcomes other drains have ready.

        Answers as :meth:`Store.record_outcome`. Cancellation: this call cannot be cancelled;
        it returns (or raises) once the outcome is committed or has failed, and a pending
        ``Cancelled`` is raised at the caller's next checkpoint.
        """
        self._check_open()
        pending = _PendingWrite(write)
        self._batch.append(pending)
        if len(self._batch) == 1:
            # The first write in becomes the leader: it yields once so that every drain with an
            # outcome ready joins the batch, then commits them all.
            await trio.lowlevel.cancel_shielded_checkpoint()
            batch, self._batch = self._batch, []
            start = time.perf_counter()
            answers: list[Job | Exception | None] = [
                StoreUnavailable("the write was interrupted before its commit was known")
            ] * len(batch)
            try:
                answers = await self._commit(batch, ttl=ttl, now=now)
            except Exception as exc:
                answers = [exc] * len(batch)
            else:
                self._observe("record_outcomes", start)
            finally:
                # Followers cannot be cancelled, so they must be woken whatever happens here
                # (a KeyboardInterrupt included).
                for member, answer in zip(batch, answers, strict=True):
                    member.answer = answer
                    if member.task is not None:
                        trio.lowlevel.reschedule(member.task)
        else:
            pending.task = trio.lowlevel.current_task()

            def abort(_: object) -> trio.lowlevel.Abort:
                return trio.lowlevel.Abort.FAILED  # the leader is committing it: wait for that

            await trio.lowlevel.wait_task_rescheduled(abort)
        if isinstance(pending.answer, Exception):
            raise pending.answer
        return pending.answer

    async def _commit(
        self, batch: list[_PendingWrite], *, ttl: float, now: float
    ) -> list[Job | Exception | None]:
        writes = [member.write for member in batch]
        with _store_errors(self.store):
            if all(w.result is None or _small(w.result) for w in writes):
                answers = self._try_fast(Store.record_outcomes, writes, ttl=ttl, now=now)
                if not isinstance(answers, _Miss):
                    return answers
            return await self.thread.run(
                Store.record_outcomes, self.store, writes, ttl=ttl, now=now
            )

    def _checkpoint(self) -> None:
        """On the store thread: empty the WAL, then let the fast path go on."""
        try:
            self.store.checkpoint("TRUNCATE")
        finally:
            self._checkpoint_pending = False  # one bool, read by the loop thread

    def _try_fast(
        self,
        fn: Callable[Concatenate[Store, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T | _Miss:
        fast = self._fast
        if fast is None or self._checkpoint_pending or not fast._lock.acquire(blocking=False):
            return _MISS
        try:
            result = fn(fast, *args, **kwargs)
        except WouldBlock:
            return _MISS
        except sqlite3.OperationalError as exc:
            if _is_lock_error(exc):
                # Refused at BEGIN IMMEDIATE, or rolled back: a store call is one transaction,
                # so nothing was written and the thread can run it again.
                return _MISS
            raise
        finally:
            fast._lock.release()
        self._commits_since_checkpoint += 1
        if self._commits_since_checkpoint >= CHECKPOINT_EVERY and self._owns_fast:
            self._commits_since_checkpoint = 0
            # TRUNCATE: a passive checkpoint racing constant writes never restarts the WAL, so
            # it would grow without end. Until it is done, calls go to the thread and queue
            # behind it, so it gets the lock at once instead of racing the loop for it.
            self._checkpoint_pending = True
            self.thread.run_soon(self._checkpoint)
        return result
