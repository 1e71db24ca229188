"""A dedicated thread that runs the blocking calls of one store, for any backend, and the
group commit of its outcome writes.

A call is queued to the thread and the calling task sleeps until the thread hands back the
outcome; answers that complete together wake the loop once. Compared with
``trio.to_thread.run_sync`` per call this saves the thread-pool round trip, and it keeps the
calls of one store in order on one connection.

Group commit happens here: grouped calls (:meth:`StoreThread.run_grouped`) of one function
that are next to each other in the queue run as one call of it, which stores them in one
transaction. The writes that queue while the thread is busy (a commit, a read) so share the
next commit, and a write that finds the thread idle is committed at once, alone. The thread
goes from one commit to the next without a hand-over to the event loop in between, and
nothing depends on the order in which trio runs its tasks.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import outcome
import trio

P = ParamSpec("P")
T = TypeVar("T")

#: Most calls taken from the queue before their answers are handed back: so also the most
#: grouped calls (outcome writes) one commit holds.
MAX_BATCH = 64


@dataclass(slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    task: trio.lowlevel.Task  # the task waiting for the answer
    token: trio.lowlevel.TrioToken  # the run it belongs to
    grouped: bool = False  # fn takes a list of items (args[0] each) and answers a list


#: What a grouped call answers: its own answer, and for the first call of its group the
#: seconds the group's call took (None for the others): one observation per commit.
Grouped = tuple[T, float | None]


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

    async def run_grouped(
        self, fn: Callable[[list[Any]], list[T | Exception]], item: object
    ) -> Grouped[T]:
        """``fn([... item ...])`` on the store thread, one call for the grouped calls of ``fn``
        next to ``item`` in the queue (see the module docstring); ``item``'s own answer, or
        the exception ``fn`` answered for it alone, or the one it raised for all.

        Cancellation: as :meth:`run`.
        """
        task = trio.lowlevel.current_task()
        call = _Call(fn, (item,), {}, task, trio.lowlevel.current_trio_token(), grouped=True)
        answer: Grouped[T] = await self._call(call)
        return answer

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
            for group, outcomes in _answered(calls):
                # Each group's callers are woken as soon as it is done, not after the calls
                # queued behind it: a commit's writers never wait for a slow read after it.
                done: dict[trio.lowlevel.TrioToken, list[tuple[trio.lowlevel.Task, Any]]] = {}
                for call, answer in zip(group, outcomes, strict=True):
                    done.setdefault(call.token, []).append((call.task, answer))
                for token, answers in done.items():
                    # A run that has finished has no task left waiting.
                    with contextlib.suppress(trio.RunFinishedError):
                        token.run_sync_soon(_wake, answers)


def _answered(calls: list[_Call]) -> Iterator[tuple[list[_Call], list[outcome.Outcome[Any]]]]:
    """Run ``calls`` in order, each run of grouped calls of one function as one call; each
    run of calls with their outcomes."""
    i = 0
    while i < len(calls):
        call, j = calls[i], i + 1
        if not call.grouped:
            yield [call], [outcome.capture(call.fn, *call.args, **call.kwargs)]
            i = j
            continue
        while j < len(calls) and calls[j].grouped and calls[j].fn == call.fn:
            j += 1
        group = calls[i:j]
        started = time.perf_counter()
        answers = outcome.capture(call.fn, [c.args[0] for c in group])
        seconds: float | None = time.perf_counter() - started
        if isinstance(answers, outcome.Error):  # one Error each: an outcome unwraps once
            yield group, [outcome.Error(answers.error) for _ in group]
        else:
            own: list[outcome.Outcome[Any]] = []
            for answer in answers.unwrap():
                if isinstance(answer, Exception):
                    own.append(outcome.Error(answer))
                else:
                    own.append(outcome.Value((answer, seconds)))
                    seconds = None  # observed once, by the first answered
            yield group, own
        i = j


def _wake(done: list[tuple[trio.lowlevel.Task, outcome.Outcome[Any]]]) -> None:
    for task, result in done:
        trio.lowlevel.reschedule(task, result)
