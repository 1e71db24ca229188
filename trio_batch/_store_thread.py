"""A dedicated thread that runs every store call for one runner.

The event loop never touches SQLite: a store call is queued to this thread and the calling task
sleeps until the thread hands back the outcome. Compared with ``trio.to_thread.run_sync`` per
call this saves the thread-pool round trip, and it lets consecutive outcome writes from several
jobs share one transaction (group commit) while each write stays atomic on its own, inside a
savepoint.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import outcome
import trio

from ._store import Store

P = ParamSpec("P")
T = TypeVar("T")

#: Most calls merged into one transaction: bounds how long the write lock is held at once.
MAX_GROUP = 64


@dataclass(slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    task: trio.lowlevel.Task
    groupable: bool


class StoreThread:
    """Runs store calls one at a time, in the order they were made, on one thread.

    Create it inside a trio run; :meth:`start` it, and :meth:`stop` it once no call is pending.
    """

    def __init__(self, store: Store, *, name: str = "trio_batch store") -> None:
        self._store = store
        self._token = trio.lowlevel.current_trio_token()
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Let the thread finish the calls queued so far, then end; returns at once."""
        self._queue.put(None)

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the store thread and return (or raise) its outcome.

        Cancellation: the call cannot be abandoned once queued, since the store may already be
        changing state, so this waits for it to finish even if cancelled, and the ``Cancelled``
        is raised at the caller's next checkpoint instead. Every store call is bounded by the
        store's busy timeout, so the wait is bounded too.
        """
        result: T = await self._call(_Call(fn, args, kwargs, trio.lowlevel.current_task(), False))
        return result

    async def run_grouped(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Like :meth:`run`, but the call may share one transaction with neighbouring grouped
        calls (group commit). Only for a store method that is atomic on its own: each grouped
        call runs in its own savepoint, and none is answered before the shared commit.
        """
        result: T = await self._call(_Call(fn, args, kwargs, trio.lowlevel.current_task(), True))
        return result

    async def _call(self, call: _Call) -> Any:
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
                if len(calls) >= MAX_GROUP:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            else:
                stopping = True
            done = self._run_calls(calls)
            if done:
                try:
                    self._token.run_sync_soon(_wake, done)
                except trio.RunFinishedError:  # pragma: no cover - no task can be waiting then
                    return

    def _run_calls(
        self, calls: list[_Call]
    ) -> list[tuple[trio.lowlevel.Task, outcome.Outcome[Any]]]:
        done: list[tuple[trio.lowlevel.Task, outcome.Outcome[Any]]] = []
        i = 0
        while i < len(calls):
            j = i
            while j < len(calls) and calls[j].groupable:
                j += 1
            if j - i >= 2:
                done.extend(self._run_group(calls[i:j]))
                i = j
            else:
                call = calls[i]
                done.append((call.task, outcome.capture(call.fn, *call.args, **call.kwargs)))
                i += 1
        return done

    def _run_group(
        self, calls: list[_Call]
    ) -> list[tuple[trio.lowlevel.Task, outcome.Outcome[Any]]]:
        """Run calls in one transaction; each is atomic in its own savepoint."""
        results: list[tuple[trio.lowlevel.Task, outcome.Outcome[Any]]] = []
        try:
            with self._store.transaction():
                for call in calls:
                    results.append((call.task, outcome.capture(call.fn, *call.args, **call.kwargs)))
        except Exception as exc:  # BEGIN or COMMIT failed: nothing in the group was stored
            return [(call.task, outcome.Error(exc)) for call in calls]
        return results


def _wake(done: list[tuple[trio.lowlevel.Task, outcome.Outcome[Any]]]) -> None:
    for task, result in done:
        trio.lowlevel.reschedule(task, result)
