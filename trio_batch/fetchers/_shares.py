"""Slots shared fairly between callers: who gets the next worker process, and when.

A :class:`FairShares` hands out slots under three limits:

- ``soft``: slots in all, as a rule;
- ``per_caller``: slots one caller may hold at once;
- ``ceiling``: slots in all, never passed. Between ``soft`` and ``ceiling`` a slot goes only to
  a caller that holds none, so a caller with nothing running gets one at once however busy
  the others are (the operating system then shares the cores between more processes), while
  the busy callers wait until the pool is back under ``soft``.

A freed slot goes to the waiting caller that holds the fewest; among callers that hold as
many, to the one served longest ago (round robin: a caller new to the queue joins the end of
the round); within one caller, to its longest waiter (FIFO). The choice is made when the slot
is freed, in the releasing task, and the slot is handed to the chosen waiter then: it never
depends on which task trio runs first.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

__all__ = ["FairShares", "SharesStatistics"]


@dataclass(frozen=True)
class SharesStatistics:
    """What a :class:`FairShares` holds now: slots held in all, and per caller held and
    waiting (callers with neither are left out)."""

    total: int
    held: dict[Hashable, int]
    waiting: dict[Hashable, int]


class _Waiter:
    """One task waiting for a slot; ``granted`` once a slot was handed to it."""

    __slots__ = ("event", "granted", "seq")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.event = trio.Event()
        self.granted = False


class FairShares:
    """Slots for callers: ``soft`` in all as a rule, ``per_caller`` for one caller at once,
    and past ``soft`` (up to ``ceiling``, never more) only for a caller that holds none.

    A caller is any hashable value (None included). Bound to the trio run that first waits
    on it (its waiters are trio events). The state it keeps is bounded by the callers that
    hold or wait for a slot: a caller with neither is forgotten.
    """

    def __init__(self, soft: int, per_caller: int, ceiling: int) -> None:
        if not 1 <= per_caller <= soft <= ceiling:
            raise ValueError("need 1 <= per_caller <= soft <= ceiling")
        self.soft = soft
        self.per_caller = per_caller
        self.ceiling = ceiling
        self._total = 0
        self._held: dict[Hashable, int] = {}
        self._queues: dict[Hashable, deque[_Waiter]] = {}
        # A caller's last grant, or its arrival if none since it was forgotten: sequence numbers.
        self._served: dict[Hashable, int] = {}
        self._seq = itertools.count()

    def __repr__(self) -> str:
        return (
            f"FairShares(soft={self.soft!r}, per_caller={self.per_caller!r}, "
            f"ceiling={self.ceiling!r}, total={self._total!r})"
        )

    @property
    def total(self) -> int:
        """Slots held now, by every caller."""
        return self._total

    def statistics(self) -> SharesStatistics:
        """Slots held in all, and per caller held and waiting."""
        return SharesStatistics(
            total=self._total,
            held={caller: n for caller, n in self._held.items() if n},
            waiting={caller: len(queue) for caller, queue in self._queues.items()},
        )

    @asynccontextmanager
    async def hold(self, caller: Hashable) -> AsyncIterator[None]:
        """Hold one slot for ``caller`` for the block (:meth:`acquire`, then :meth:`release`
        however the block ends, cancellation included)."""
        await self.acquire(caller)
        try:
            yield
        finally:
            self.release(caller)

    async def acquire(self, caller: Hashable) -> None:
        """Take one slot for ``caller``, waiting until the policy gives it one.

        Always a checkpoint. On cancellation (or any exception) while waiting, ``caller``
        holds no slot it did not hold before and its place in the queue is given up; a slot
        handed to it in the same instant is passed on to the next waiter.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._may_take(caller) and not self._queues.get(caller):
            self._grant(caller)
            try:
                await trio.lowlevel.cancel_shielded_checkpoint()
            except BaseException:  # KeyboardInterrupt: the slot is not kept
                self.release(caller)
                raise
            return
        waiter = _Waiter(next(self._seq))
        self._queues.setdefault(caller, deque()).append(waiter)
        self._served.setdefault(caller, waiter.seq)  # a newcomer joins the round's end
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.release(caller)  # handed to us as we were stopped: the next one's
            else:
                self._leave_queue(caller, waiter)
            raise

    def release(self, caller: Hashable) -> None:
        """Give back one of ``caller``'s slots; it goes to the next waiter the policy picks
        (synchronously: no checkpoint). Raises RuntimeError if ``caller`` holds none."""
        held = self._held.get(caller, 0)
        if held < 1:
            raise RuntimeError(f"caller {caller!r} holds no slot to release")
        self._held[caller] = held - 1
        self._total -= 1
        self._forget_if_idle(caller)
        self._dispatch()

    def _may_take(self, caller: Hashable) -> bool:
        held = self._held.get(caller, 0)
        if held == 0:
            return self._total < self.ceiling
        return held < self.per_caller and self._total < self.soft

    def _rank(self, caller: Hashable) -> tuple[int, int]:
        """Fewest held first, then served (or come) longest ago: every number is unique."""
        return self._held.get(caller, 0), self._served[caller]

    def _grant(self, caller: Hashable) -> None:
        self._held[caller] = self._held.get(caller, 0) + 1
        self._total += 1
        self._served[caller] = next(self._seq)

    def _dispatch(self) -> None:
        """Hand free slots to waiters, best ranked first, while any waiter may take one."""
        while True:
            ready = [caller for caller in self._queues if self._may_take(caller)]
            if not ready:
                return
            caller = min(ready, key=self._rank)
            queue = self._queues[caller]
            waiter = queue.popleft()
            if not queue:
                del self._queues[caller]
            self._grant(caller)
            waiter.granted = True
            waiter.event.set()

    def _leave_queue(self, caller: Hashable, waiter: _Waiter) -> None:
        queue = self._queues[caller]
        queue.remove(waiter)
        if not queue:
            del self._queues[caller]
        self._forget_if_idle(caller)

    def _forget_if_idle(self, caller: Hashable) -> None:
        if not self._held.get(caller) and caller not in self._queues:
            self._held.pop(caller, None)
            self._served.pop(caller, None)
