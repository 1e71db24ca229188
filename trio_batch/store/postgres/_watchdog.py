"""The client-side bound on a store call: a call past its deadline has its socket shut down.

A blocking psycopg call waits on its socket for as long as the server (or a network that
swallows packets) keeps it waiting; libpq has no per-call timeout. :class:`Watchdog` is one
thread per store connection that, once the call it guards passes its deadline, shuts the
socket down (``shutdown(2)``, on a duplicate of the descriptor): the blocked call then fails at
once with a lost connection, which the store already handles (a write in doubt is recognised
when retried). The server side is bounded separately (``statement_timeout`` and friends).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["Watchdog", "shut_socket"]


def shut_socket(fileno: int) -> None:
    """Shut down both directions of the socket ``fileno`` (the descriptor stays open)."""
    with contextlib.suppress(OSError):
        dup = socket.socket(fileno=socket.dup(fileno))
        try:
            dup.shutdown(socket.SHUT_RDWR)
        finally:
            dup.close()


class Watchdog:
    """Calls ``cut()`` if the block :meth:`guard` opens is still running at its deadline.

    One guarded block at a time (a store connection is used from one thread). Starting and
    ending a block only sets an attribute: the watchdog's thread is not woken per call (a
    lock handed to it on every call costs the store thread a scheduling delay on a loaded
    machine). It sleeps until the deadline of the block it saw last, or ``poll`` seconds when
    none runs; ``poll`` at most the shortest timeout used keeps every cut on time. A block
    whose deadline is nearer than ``poll`` (a call that waited behind others, or the rest of
    one already under way) wakes it, or its cut could come up to ``poll`` late. ``cut`` runs
    on the watchdog's thread under :attr:`lock`, which the guarded side also takes while it
    swaps or closes what ``cut`` reaches (so ``cut`` never sees a closed socket).
    """

    def __init__(self, cut: Callable[[], None], *, poll: float, name: str) -> None:
        self.lock = threading.Lock()
        self._cut = cut
        self._poll = poll
        self._calls = itertools.count(1)
        self._current: tuple[int, float] | None = None  # (call number, monotonic deadline)
        self._fired: int | None = None
        self._closed = threading.Event()
        self._wake = threading.Event()  # set by a block too near its deadline, and by close
        self._name = name
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def guard(self, deadline: float) -> Iterator[Callable[[], bool]]:
        """Guard the block until ``deadline`` (``time.monotonic()``); yields a function that
        tells whether the watchdog cut this block's connection."""
        if self._thread is None and not self._closed.is_set():
            self._thread = threading.Thread(target=self._watch, name=self._name, daemon=True)
            self._thread.start()
        call = next(self._calls)
        self._current = (call, deadline)
        if deadline - time.monotonic() < self._poll:
            self._wake.set()
        try:
            yield lambda: self._fired == call
        finally:
            self._current = None

    def close(self) -> None:
        """Stop the thread (it ends at once)."""
        self._closed.set()
        self._wake.set()

    def _watch(self) -> None:
        delay = self._poll
        while True:
            self._wake.wait(delay)
            self._wake.clear()  # before reading the block: a wake after it is not lost
            if self._closed.is_set():
                return
            current = self._current
            if current is None:
                delay = self._poll
                continue
            call, deadline = current
            left = deadline - time.monotonic()
            if left > 0:
                delay = min(left, self._poll)
                continue
            with self.lock:
                if self._current == current and self._fired != call:
                    self._fired = call
                    self._cut()
            delay = self._poll
