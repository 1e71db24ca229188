"""``ThreadCall``: a face's operation that is one call of its sync store runs that call on the
store thread, and reads as it (name, parameters, docstring) to ``help()`` and ``inspect``."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import pytest
import trio

from trio_batch.store._face import StoreFace, ThreadCall
from trio_batch.store.sqlite import SQLiteJobStore
from trio_batch.store.sqlite._views import outcomes_from

P = ParamSpec("P")
T = TypeVar("T")


class Probe:
    """A sync store whose one call says which thread it ran on."""

    def where(self, x: int, *, y: int = 0) -> tuple[str, int]:
        """The thread's name, and ``x + y``."""
        if x < 0:
            raise ValueError("x is negative")
        return threading.current_thread().name, x + y


class ProbeFace(StoreFace[Probe]):
    where = ThreadCall(Probe.where)

    def __init__(self) -> None:
        super().__init__(thread_name="probe store")
        self.store = Probe()
        self.location = "probe"

    async def _on_thread(
        self, fn: Callable[Concatenate[Probe, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        self._start()
        return await self._thread.run(fn, self.store, *args, **kwargs)

    async def aclose(self) -> None:
        await self._stop_thread()


async def test_a_thread_call_runs_its_call_on_the_store_thread() -> None:
    async with ProbeFace() as face:
        assert await face.where(1, y=2) == ("probe store", 3)
        with pytest.raises(ValueError, match="negative"):
            await face.where(-1)


async def test_a_cancelled_thread_call_completes_and_the_cancel_comes_after() -> None:
    answers: list[Any] = []
    async with ProbeFace() as face:
        with trio.CancelScope() as scope:
            scope.cancel()
            answers.append(await face.where(2))
            await trio.lowlevel.checkpoint()
            answers.append("not reached")
    assert answers == [("probe store", 2)]
    assert scope.cancelled_caught


def test_a_thread_call_reads_as_its_sync_call() -> None:
    method = SQLiteJobStore.get_outcomes
    assert method.__qualname__ == "SQLiteJobStore.get_outcomes"
    assert method.__module__ == SQLiteJobStore.__module__
    assert inspect.iscoroutinefunction(method)
    names = list(inspect.signature(method).parameters)
    assert names == ["self", *list(inspect.signature(outcomes_from).parameters)[1:]]
    doc = inspect.getdoc(method) or ""
    assert doc.startswith(inspect.getdoc(outcomes_from) or "<none>")
    assert "Cancellation: once queued, the call completes" in doc


def test_a_bound_thread_call_takes_the_sync_calls_parameters() -> None:
    bound = ProbeFace().where
    assert inspect.iscoroutinefunction(bound)  # what the tracing wrapper looks for
    assert str(inspect.signature(bound)) == "(x: 'int', *, y: 'int' = 0) -> 'tuple[str, int]'"
