"""How much of one pass of trio's scheduler a store's loop-thread calls may use.

trio runs every task that is runnable at the start of a pass, one after another, and looks at
its timers and I/O only between passes. A store call made on the loop thread (SQLite's fast
path) is synchronous: a few of them in one pass, say eight callers submitting the moment their
jobs finish together, delay every timer and every socket by their sum. :class:`LoopBudget`
counts the time such calls take in the current pass; once the pass has used its budget, the
next call yields first, to a later pass, where the budget is whole again. Work is spread over
passes instead of piling into one; none moves off the loop, so throughput stays.

Calls that wait queue in arrival order: one at the head yields pass after pass until a pass
has room, the rest sleep in the queue, so a thousand waiting calls cost a pass nothing and
are never let through all at once (each pass lets through at most one queued call, beside
the calls that found room without waiting).
"""

from __future__ import annotations

import trio

__all__ = ["LoopBudget"]

#: At most this many passes the call at the head of the queue waits for room before it runs
#: anyway: calls that never wait (new ones finding room, before the queue formed) can spend
#: pass after pass. (A call from a run the budget is not installed in never waits.)
MAX_DEFERRALS = 8


class LoopBudget(trio.abc.Instrument):
    """The loop-thread time left in the current scheduler pass.

    :meth:`install` it in the trio run whose loop it guards; it is refilled after every wait
    for I/O, which trio makes once per pass. Calls from another run are never held back.
    """

    def __init__(self, seconds: float) -> None:
        #: The budget of one pass, in seconds.
        self.seconds = seconds
        #: Seconds spent in the current pass so far.
        self.used = 0.0
        self._root: trio.lowlevel.Task | None = None
        # A call is at the head of the queue (or is being handed the head): later calls queue.
        self._head = False
        self._queue = trio.lowlevel.ParkingLot()

    def after_io_wait(self, timeout: float) -> None:
        """A new pass begins: the budget is whole again."""
        self.used = 0.0

    def install(self) -> None:
        """Guard the current trio run's loop (once; later calls change nothing)."""
        if self._root is None:
            self._root = trio.lowlevel.current_root_task()
            trio.lowlevel.add_instrument(self)

    def uninstall(self) -> None:
        """Stop guarding, if called from the run it guards (a finished run dropped it)."""
        root, self._root = self._root, None
        self._head = False
        self._queue.unpark_all()  # they see the budget no longer guards the run, and go on
        if root is not None and trio.lowlevel.current_root_task() is root:
            trio.lowlevel.remove_instrument(self)

    @property
    def guards_this_run(self) -> bool:
        """True if called from the trio run the budget is installed in, the only one whose
        passes refill it."""
        return self._root is not None and trio.lowlevel.current_root_task() is self._root

    @property
    def spent(self) -> bool:
        """True once the current pass has used more than its budget."""
        return self.used > self.seconds

    async def wait_for_room(self, *, cancellable: bool = False) -> None:
        """Return at once if this pass has room and no call is queued; else queue, in arrival
        order, and return once at the head a pass has room or :data:`MAX_DEFERRALS` passes
        went by. A queued call waits for those ahead of it: at most one leaves the queue per
        pass (and per :data:`MAX_DEFERRALS` passes at worst).

        Cancellation: by default never raises ``Cancelled`` (the waits are shielded), so a
        call that waits here still runs; a pending cancel arrives at the caller's next
        checkpoint. With ``cancellable=True`` a cancel ends the wait with ``Cancelled`` (for
        a call that has done nothing yet); the queue goes on without it.
        """
        if not self.guards_this_run or (not self.spent and not self._head):
            return
        if self._head:
            with trio.CancelScope(shield=not cancellable):
                await self._queue.park()  # woken as the new head (or by uninstall)
            if not self.guards_this_run:
                return
        self._head = True
        try:
            if cancellable:  # a cancel that came while parked: woken or not, it ends the wait
                await trio.lowlevel.checkpoint_if_cancelled()
            for _ in range(MAX_DEFERRALS):
                if not self.spent or not self.guards_this_run:
                    return
                if cancellable:
                    await trio.lowlevel.checkpoint()
                else:
                    await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            # The head passes to the next in the queue, if there is one.
            if self._root is None or not self._queue.unpark():
                self._head = False
