"""How the SQLite backend reaches its :class:`~trio_batch.Store`: the event loop never waits.

Three paths to the synchronous :class:`~trio_batch.Store`:

- **The fast path**, on the loop thread, for a small call that cannot wait: a second connection
  to the same file with a busy timeout of 0 and automatic WAL checkpoints off. Under
  ``synchronous=NORMAL`` a WAL commit only appends to the WAL file (no fsync), so such a call
  costs tens of microseconds. The moment it would wait, because another connection or process
  holds the write lock (SQLite answers "database is locked" at once, at ``BEGIN IMMEDIATE``,
  before anything is written) or the in-process connection is busy, it gives up and the call
  goes to the store thread instead. Beside a checkpoint's copy it goes on writing (up to a
  cap) and reads on a third connection that no thread uses; beside its restart it writes
  nothing, and reads on that connection rather than queue behind the restart on the thread.
- **The store thread** (:class:`~trio_batch.store._thread.StoreThread`) for everything else:
  calls that may wait on a lock or a disk flush (``synchronous=FULL``), big results, purges and
  checkpoints.
- **The side thread**, only while a checkpoint copies the WAL into the database (the store
  thread is busy with it): the calls the fast path declined (a big result, say), on the
  fast-path connection.

:class:`FastPaths` holds the three and chooses between them; :class:`SQLiteJobStore
<trio_batch.store.sqlite.SQLiteJobStore>` builds the :class:`~trio_batch.store.JobStore` on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import trio

from ..._errors import StoreError
from ..._loop_budget import LoopBudget
from .._face import StoreFace
from .._thread import StoreThread
from ._errors import translate_errors
from ._fast_path import MISS, Miss, run_unless_declined
from ._store import Store

__all__ = ["CHECKPOINT_EVERY", "FAST_PASS_BUDGET", "FastPaths"]

P = ParamSpec("P")
T = TypeVar("T")

#: Fast-path writes between two WAL checkpoints run on the store thread: an outcome write
#: counts one per outcome in its commit (a shared commit writes a page or two per outcome),
#: another write (a job created or finished) one, a read none. The fast connection never
#: checkpoints (that would wait on a disk flush on the loop thread), so this bounds the WAL:
#: about 1000 outcomes' pages, some MB. While a checkpoint copies the WAL, the loop and the
#: side thread make at most half as many writes, and later ones wait for it: the WAL holds at
#: most 1.5 times this many writes when it restarts, however long a slow disk makes the copy.
#: Counting outcomes, not commits, keeps shared commits from letting the WAL grow several
#: times larger.
CHECKPOINT_EVERY = 1000
#: Loop-thread time (seconds) the fast path may use in one pass of trio's scheduler; past it,
#: the next call waits for a later pass (:class:`~trio_batch._loop_budget.LoopBudget`).
#: A pass still runs its first call whatever it costs (about 0.3 ms for a 64-target job).
FAST_PASS_BUDGET = 0.00015


class FastPaths(StoreFace):
    """The fast path, the store thread and the side thread over one :class:`Store`, and the
    WAL checkpoints that bound the fast path's writes. The store thread and the fast-path
    connection start at the first call, from inside a trio run; :meth:`aclose` them.
    """

    def __init__(self, store: Store, *, owns_store: bool = False) -> None:
        super().__init__()
        self.store = store
        self.location = store.path
        self._owns_store = owns_store
        self._thread = StoreThread()
        self._started = False
        self._closed = False
        self._fast: Store | None = None
        self._owns_fast = False
        # Reads on the loop while a checkpoint runs (see _try_fast).
        self._reader: Store | None = None
        self._writes_since_checkpoint = 0
        # A checkpoint is queued or running: the loop reads on the reader, writes only if...
        self._checkpoint_pending = False
        # ...it is at its first step, the copy: writes may use the fast connection, on the loop
        # or on the side thread (see _room_beside_copy, _off_loop).
        self._checkpoint_copying = False
        self._writes_beside_checkpoint = 0  # by the loop and the side thread, during this copy
        self._side_thread = StoreThread(name="trio_batch store, beside a checkpoint")
        self._budget = LoopBudget(FAST_PASS_BUDGET)

    # ----------------------------------------------------------------------------------------
    # Life cycle

    def _start(self) -> None:
        if self._closed:
            raise StoreError(f"the store {self.location!r} is closed; it answers no more calls")
        if self._started:
            return
        # Only NORMAL: under FULL every commit waits for a disk flush, which the loop must not.
        if self.store.synchronous == "NORMAL":
            if self.store.is_memory:
                self._fast = self.store  # one connection; its lock says when the thread has it
            else:
                with translate_errors(self.store.busy_timeout):
                    self._fast = self.store.reopen(busy_timeout=0, wal_autocheckpoint=False)
                    self._reader = self.store.reopen(busy_timeout=0, wal_autocheckpoint=False)
                self._owns_fast = True
                self._side_thread.start()
        self._budget.install()
        self._thread.start()
        self._started = True

    async def aclose(self) -> None:
        """Close the fast-path connection, end the store thread after its queued calls, and
        close the ``Store`` if this owns it. Later calls raise :class:`StoreError`.

        Cancellation: the closing completes; nothing is left half-closed.
        """
        if self._closed:
            return
        self._closed = True
        self._budget.uninstall()
        fast, self._fast = self._fast, None
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()  # used on the loop only: no call of it is queued anywhere
        if self._started:
            with trio.CancelScope(shield=True):
                if self._owns_fast and fast is not None:
                    await self._side_thread.run(fast.close)  # after every queued call
                    self._side_thread.stop()
                if self._owns_store:
                    await self._thread.run(self.store.close)  # after every queued call
            self._thread.stop()
        elif self._owns_store:
            self.store.close()

    # ----------------------------------------------------------------------------------------
    # The two paths

    async def _call(
        self,
        writes: int,
        fn: Callable[Concatenate[Store, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(store, ...)``: on the fast path if it can run there, else on the thread.
        ``writes``: what it counts toward the next checkpoint (see :data:`CHECKPOINT_EVERY`); a
        call that counts none writes nothing (it may run beside a checkpoint, see
        :meth:`_try_fast`).

        Raises :class:`StoreError` if the store is closed, or closes while the call waits for
        room in the loop (see :meth:`_ready_for_fast_call`).

        Cancellation: as :meth:`StoreThread.run`: once started, the call completes, and
        ``Cancelled`` is raised at the caller's next checkpoint.
        """
        answer, fast = await self._fast_else_off_loop(writes, fn, args, kwargs)
        if fast:
            await trio.lowlevel.cancel_shielded_checkpoint()  # an async call always yields once
        return answer

    async def _fast_else_off_loop(
        self,
        writes: int,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        fast_kwargs: dict[str, Any] | None = None,
        try_fast: bool = True,
        wait: bool = True,
    ) -> tuple[T, bool]:
        """``(fn(store, *args, **kwargs), ran_on_the_loop)``: tried on the fast path first (with
        ``fast_kwargs`` added there, and only if ``try_fast``), off the loop if it declines.
        ``wait=False``: in this pass whatever its budget (the call's turn was a call just before).

        The one place that chooses between the paths. A fast answer has not yielded yet (the
        caller decides when it does); an answer from a thread has.

        Cancellation: as :meth:`_call`.
        """
        if try_fast and wait:
            await self._ready_for_fast_call()
        else:
            self._start()  # no room in the loop to wait for
        with translate_errors(self.store.busy_timeout):
            if try_fast:
                extra = kwargs if fast_kwargs is None else {**kwargs, **fast_kwargs}
                result = self._try_fast(writes, fn, *args, **extra)
                if not isinstance(result, Miss):
                    return result, True
            return await self._off_loop(writes, fn, *args, **kwargs), False

    async def _ready_for_fast_call(self) -> None:
        """Check that the store is open (starting it), and wait for room in a later pass of the
        loop if this pass has spent its budget.

        Raises :class:`StoreError` if the store is closed, also when :meth:`aclose` ran while
        the call waited (or while a group commit's leader yielded to gather its batch): the
        call must get the closed store's error, not the stopped thread's or the closed
        database's.

        Cancellation: never raises ``Cancelled`` (see :meth:`LoopBudget.wait_for_room`).
        """
        self._start()
        if self._budget.spent:
            await self._budget.wait_for_room()
            self._start()  # aclose may have run meanwhile

    async def _on_thread(
        self, fn: Callable[Concatenate[Store, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``fn(store, ...)`` on the store thread, whatever it is."""
        self._start()
        with translate_errors(self.store.busy_timeout):
            return await self._thread.run(fn, self.store, *args, **kwargs)

    async def _off_loop(
        self,
        writes: int,
        fn: Callable[Concatenate[Store, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(store, ...)`` off the loop, for a call the fast path declined: on the side thread
        with the fast connection while a checkpoint copies the WAL, else on the store thread.

        The store thread is busy with the checkpoint then, and a call queued there would wait
        for all of it. The copy step takes no lock, so the fast connection may go on writing
        beside it, on the loop or here (see :meth:`_checkpoint`).

        Cancellation: as :meth:`StoreThread.run`, on either thread.
        """
        with translate_errors(self.store.busy_timeout):
            if self._checkpoint_copying:
                result = await self._side_thread.run(
                    self._fast_beside_checkpoint, writes, fn, args, kwargs
                )
                if not isinstance(result, Miss):
                    return result
                self._start()  # aclose may have run meanwhile: the closed store's error
            return await self._thread.run(fn, self.store, *args, **kwargs)

    def _fast_beside_checkpoint(
        self,
        writes: int,
        fn: Callable[..., T],
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> T | Miss:
        """On the side thread: ``fn(fast, ...)`` if the checkpoint is still copying the WAL.

        Once it restarts the WAL, no other connection may write (its ``RESTART`` waits for
        them), so calls go to the store thread and queue behind it. A write that races the
        restart is refused at ``BEGIN IMMEDIATE``, having written nothing, and goes there too.
        So do writes past ``CHECKPOINT_EVERY // 2`` in one copy (counted as the loop counts
        them: a shared commit of outcomes one per outcome), which bounds the WAL.
        """
        fast = self._fast
        if fast is None or not self._checkpoint_copying:
            return MISS
        with fast._lock:
            if not self._room_beside_copy(writes):
                return MISS
            return run_unless_declined(fn, fast, args, kwargs)

    def _room_beside_copy(self, writes: int) -> bool:
        """With the fast connection's lock held: True, counting them, if ``writes`` may be made
        on it beside the checkpoint's copy (at most ``CHECKPOINT_EVERY // 2`` in one copy, on
        either thread, which bounds the WAL); False once the checkpoint restarts the WAL."""
        if not self._checkpoint_copying or (
            writes and self._writes_beside_checkpoint + writes > CHECKPOINT_EVERY // 2
        ):
            return False
        self._writes_beside_checkpoint += writes
        return True

    # Protected from KeyboardInterrupt: trio raises it wherever unprotected code runs, and
    # between a BEGIN and the block that ends it, it would leave this connection inside a
    # transaction that nothing commits. Held back, it arrives at the caller's next checkpoint;
    # the call never waits (busy timeout 0), so that is soon.
    @trio.lowlevel.enable_ki_protection
    def _try_fast(
        self,
        writes: int,
        fn: Callable[Concatenate[Store, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T | Miss:
        """``fn(fast, ...)`` on the loop thread, or :data:`MISS` if it would wait; ``writes``
        is what it counts toward the next checkpoint (see :data:`CHECKPOINT_EVERY`). While a
        checkpoint runs, a read (no write counted) runs on the reader connection."""
        fast = self._fast
        beside = fast is not None and self._checkpoint_pending
        if beside and not writes:
            # A read runs on the reader, where no thread waits for it. Queued behind the
            # restart, reads came back in a burst.
            fast = self._reader
        if fast is None or not fast._lock.acquire(blocking=False):
            return MISS
        started = time.perf_counter()
        try:
            if beside and writes and not self._room_beside_copy(writes):
                return MISS
            result = run_unless_declined(fn, fast, args, kwargs)
        finally:
            fast._lock.release()
            self._budget.used += time.perf_counter() - started
        if isinstance(result, Miss) or beside:
            return result  # beside a checkpoint, a write counted toward its cap, not the next
        self._count_writes(writes)
        return result

    def _count_writes(self, writes: int) -> None:
        """Count ``writes`` made on the loop toward the next checkpoint; queue it when due."""
        self._writes_since_checkpoint += writes
        if self._writes_since_checkpoint >= CHECKPOINT_EVERY and self._owns_fast:
            self._writes_since_checkpoint = 0
            # Until it is done, the loop's writes beside it are capped (see _room_beside_copy),
            # and none is made once the restart is due: that step waits for writers.
            self._checkpoint_pending = True
            self._writes_beside_checkpoint = 0
            self._checkpoint_copying = True
            self._thread.run_soon(self._checkpoint)

    def _checkpoint(self) -> None:
        """On the store thread: copy the WAL into the database and restart it from its
        beginning (its file keeps its size, up to the journal size limit), then let the fast
        path go on.

        In three steps. ``PASSIVE`` copies the bulk and takes no write lock: meanwhile the loop
        goes on writing on the fast connection (the calls it declines run on the side thread),
        so drains go on storing outcomes instead of waiting for the checkpoint. A second
        ``PASSIVE`` copies most of what the loop wrote beside the first, so that less is left
        for the step writers wait for. Racing constant writes, a copy never restarts the WAL,
        which would then grow without end, so ``RESTART`` follows: it copies the rest, waits
        for writers, and restarts the WAL. Writes go to this thread then, and queue behind it,
        so it gets the write lock at once; reads stay on the loop's reader connection (the
        restart waits only for readers of the WAL's old frames, and each read ends before the
        loop goes on).
        (Not ``TRUNCATE``: growing the emptied file again made every outcome write 20% slower.)
        """
        try:
            self.store.checkpoint("PASSIVE")
            self.store.checkpoint("PASSIVE")  # what the loop wrote beside the first
            self._checkpoint_copying = False
            self.store.checkpoint("RESTART")
        finally:
            self._checkpoint_copying = False
            self._checkpoint_pending = False  # one bool each, read by the loop thread
