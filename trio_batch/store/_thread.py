"""A dedicated thread that runs the blocking calls of one store, for any backend.

A call is queued to the thread and the calling task sleeps until the thread hands back the
outcome; answers that complete together wake the loop once. Compared with
``trio.to_thread.run_sync`` per call this saves the thread-pool round trip, and it keeps the
calls of one store in order on one connection.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import outcome
import trio

P = ParamSpec("P")
T = TypeVar("T")

#: Most calls taken from the queue before their answers are handed back.
MAX_BATCH = 64

_log = logging.getLogger("trio_batch")


@dataclass(slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    task: trio.lowlevel.Task | None  # None: nobody waits for the answer
    token: trio.lowlevel.TrioToken | None  # the run the waiting task belongs to


class StoreThread:
    """Runs store calls one at a time, in the order they were made, on one thread.

    :meth:`start` it, and :meth:`stop` it once no call is pending. Calls may come from any trio
    run (each answer goes back to the run its caller belongs to).
    """

    def __init__(self, *, name: str = "trio_batch store") -> None:
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self.stopped = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    @property
    def started(self) -> bool:
        """True once :meth:`start` has started the thread."""
        return self._thread.ident is not None

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Let the thread finish the calls queued so far, then end; returns at once.

        Later calls raise :class:`trio.ClosedResourceError` instead of waiting for a thread
        that will never answer.
        """
        if not self.stopped:
            self.stopped = True
            self._queue.put(None)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the store thread and return (or raise) its outcome.

        Cancellation: the call cannot be abandoned once queued, since the store may already be
        changing state, so this waits for it to finish even if cancelled, and the ``Cancelled``
        is raised at the caller's next checkpoint instead. Every store call is bounded by the
        store's busy timeout, so the wait is bounded too.
        """
        call = _Call(
            fn, args, kwargs, trio.lowlevel.current_task(), trio.lowlevel.current_trio_token()
        )
        result: T = await self._call(call)
        return result

    def run_soon(self, fn: Callable[P, object], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """Queue ``fn(*args, **kwargs)`` without waiting for it; an error it raises is logged."""
        if not self.stopped:
            self._queue.put(_Call(fn, args, kwargs, None, None))

    async def _call(self, call: _Call) -> Any:
        if self.stopped:
            raise trio.ClosedResourceError("the store thread has stopped")
        self._queue.put(call)

        def abort(_: object) -> trio.lowlevel.Abort:
            return trio.lowlevel.Abort.FAILED  # the call runs to completion; see run()

        return await trio.lowlevel.wait_task_rescheduled(abort)

    # ---------------------------------------------------------------------------------------
    # On the store thread

    def _serve(self) -> None:
        stopping = False
        while not stopping:
            calls: list[_Call] = []
            item = self._queue.get()
            while item is not None:
                calls.append(item)
                if len(calls) >= MAX_BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            else:
                stopping = True
            done: dict[trio.lowlevel.TrioToken, list[tuple[trio.lowlevel.Task, Any]]] = {}
            for call in calls:
                answer = outcome.capture(call.fn, *call.args, **call.kwargs)
                if call.task is not None and call.token is not None:
                    done.setdefault(call.token, []).append((call.task, answer))
                elif isinstance(answer, outcome.Error):
                    _log.error("background store call failed", exc_info=answer.error)
            for token, answers in done.items():
                # A run that has finished has no task left waiting.
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(_wake, answers)


def _wake(done: list[tuple[trio.lowlevel.Task, outcome.Outcome[Any]]]) -> None:
    for task, result in done:
        trio.lowlevel.reschedule(task, result)


def thread_deadline(deadline: float) -> float:
    """``deadline`` (trio time) on the clock a thread's bound reads (``time.monotonic()``): the
    same moment, so a call that goes on a thread keeps the deadline it was given."""
    return time.monotonic() + (deadline - trio.current_time())
