"""How late a trio timer wakes, and how much of that the loop slept: the soak's measure.

Linux's ``epoll_wait`` takes whole milliseconds and CPython rounds a timeout up, so a loop that
goes idle 0.3 ms before a timer is due sleeps about 1.09 ms (``select.epoll().poll(0.0001)``
takes 1.09 ms on this machine): the timer wakes late with no task holding the loop.
:class:`IdleWaits` records the loop's idle waits, and :func:`slept_past_due` says how long of
each beat's lateness the loop spent in one; the rest is what tasks (and the collector, and the
machine) held it for. ``tests/http/test_load.py`` and :mod:`benchmarks.open_load` print both.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable

import trio

__all__ = ["IdleWaits", "slept_past_due"]

#: A wait of the loop for I/O that could sleep: (began, ended), ``time.perf_counter()``.
Idle = tuple[float, float]


class IdleWaits(trio.abc.Instrument):
    """Every wait of the loop for I/O with a timeout (nothing was runnable); install it with
    ``trio.lowlevel.add_instrument``. A zero timeout is a poll between passes, not a wait."""

    def __init__(self) -> None:
        self.waits: list[Idle] = []
        self._began: float | None = None

    def before_io_wait(self, timeout: float) -> None:
        """An idle wait begins."""
        self._began = time.perf_counter() if timeout > 0 else None

    def after_io_wait(self, timeout: float) -> None:
        """An idle wait ends."""
        if self._began is not None:
            self.waits.append((self._began, time.perf_counter()))


def slept_past_due(beats: Iterable[tuple[float, float]], waits: list[Idle]) -> list[float]:
    """For each beat ``(due, woke)`` (``time.perf_counter()``), the seconds the loop spent in
    ``waits`` between the beat's due time and its waking."""
    ends = [ended for _, ended in waits]  # the waits follow one another: both sorted
    past = []
    for due, woke in beats:
        slept = 0.0
        i = bisect.bisect_right(ends, due)  # the first wait that ended after the beat was due
        while i < len(waits) and waits[i][0] < woke:
            slept += min(waits[i][1], woke) - max(waits[i][0], due)
            i += 1
        past.append(slept)
    return past
