"""What every backend's async face shares: the store thread, group-committed outcome writes,
the write observer, and ``async with``.

A backend's :class:`~trio_batch.store.JobStore` subclasses :class:`StoreFace` and supplies
:meth:`StoreFace._on_thread` (one call of its sync store on the store thread, with its error
translation and its bound), :meth:`StoreFace._store_outcomes` (on the store thread: one
transaction for a batch of writes, one answer each), :meth:`StoreFace._outcome_on_thread` (its
error translation around the hop) and :meth:`StoreFace.aclose`. An operation that only calls
the sync store is a :class:`ThreadCall`; one that adds anything (an argument, an observer, a
conversion) is a method of the backend's own. An outcome write goes
:meth:`StoreFace.record_outcome` → the backend's ``_outcome_on_thread`` →
:meth:`StoreThread.run_grouped <trio_batch.store._thread.StoreThread.run_grouped>` → on the
thread, the backend's ``_store_outcomes`` with the writes queued beside it → its store's
``record_outcomes``. Every call of a backend runs on its one store thread, in the order
made: the event loop never runs SQL.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import time
from collections.abc import Callable, Coroutine
from types import MethodType
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

import trio

from .._errors import StoreError
from .._model import Job, OutcomeWrite
from .._text import MAX_INDEX, MAX_INT64, check_whole
from ._protocol import ReapObserver, WriteObserver
from ._thread import Grouped, StoreThread

__all__ = ["StoreFace", "ThreadCall", "TimedWrite", "check_paging"]

P = ParamSpec("P")
T = TypeVar("T")
#: The backend's sync store. Covariant: a face of a ``Store`` runs the methods of its bases.
S_co = TypeVar("S_co", covariant=True)
S = TypeVar("S")

#: An outcome write with the lease length, the time it was made at, and the deadline of its
#: call (``time.monotonic()``, what a thread reads; ``math.inf`` where the backend bounds
#: each call itself, as SQLite does).
TimedWrite = tuple[OutcomeWrite, float, float, float]


class StoreFace(Generic[S_co]):
    """The shared part of a backend's async store over its sync store ``S_co``; see the
    module docstring."""

    #: Where the store is, for messages (a path, or a URL without its password).
    location: str

    def __init__(self, *, thread_name: str) -> None:
        #: See :data:`~trio_batch.store.WriteObserver`; None for no observer.
        self.on_write: WriteObserver | None = None
        #: See :data:`~trio_batch.store.ReapObserver`; None for no observer.
        self.on_reaped: ReapObserver | None = None
        self._thread = StoreThread(name=thread_name)
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the store's connections and threads; it answers no more calls."""
        raise NotImplementedError

    async def _on_thread(
        self, fn: Callable[Concatenate[S_co, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``fn(store, ...)`` on the store thread, the backend's store errors translated,
        within its bound. Cancellation: as :meth:`StoreThread.run
        <trio_batch.store._thread.StoreThread.run>`: once queued, the call completes (bounded),
        and ``Cancelled`` is raised at the caller's next checkpoint."""
        raise NotImplementedError

    def _start(self) -> None:
        """Start the store thread at the first call, from inside a trio run."""
        if self._closed:
            raise StoreError(f"the store {self.location} is closed; it answers no more calls")
        if not self._thread.started:
            self._thread.start()

    async def _stop_thread(self, last: Callable[[], object] | None = None) -> None:
        """Run ``last()`` (closing the connection) after every queued call, then end the
        thread. Cancellation: shielded; it completes (each queued call is bounded)."""
        self._closed = True
        if self._thread.started:
            with trio.CancelScope(shield=True):
                if last is not None:
                    await self._thread.run(last)
            self._thread.stop()
        elif last is not None:
            last()

    def _deadline(self) -> float:
        """The ``time.monotonic()`` by which an outcome write made now must be known
        (``math.inf`` where every call on the thread bounds itself, as SQLite's busy timeout
        does)."""
        return math.inf

    async def record_outcome(self, write: OutcomeWrite, *, ttl: float, now: float) -> Job | None:
        """Store one outcome, sharing a commit with the writes queued beside it on the store
        thread (see :mod:`~trio_batch.store._thread`).

        Answers the job as stored, or None (the job is unknown or lapsed, or not this
        runner's: nothing written), or raises the error that refused it (such as
        :class:`~trio_batch.OutcomeExists`).

        Cancellation: this call cannot be cancelled; it returns (or raises) once the outcome
        is committed or has failed, and a pending ``Cancelled`` is raised at the caller's next
        checkpoint.
        """
        self._start()
        job, seconds = await self._outcome_on_thread((write, ttl, now, self._deadline()))
        if seconds is not None and self.on_write is not None:
            # An observer's bug must not fail a write that succeeded.
            with contextlib.suppress(Exception):
                self.on_write("record_outcomes", seconds)
        return job

    async def _outcome_on_thread(self, timed: TimedWrite) -> Grouped[Job | None]:
        """``self._thread.run_grouped(self._store_outcomes, timed)``, the backend's store
        errors translated."""
        raise NotImplementedError

    def _store_outcomes(self, batch: list[TimedWrite]) -> list[Job | Exception | None]:
        """On the store thread: store a batch of writes in one transaction, each
        all-or-nothing; one answer per write. One commit, one moment: the first write's ttl
        and time serve for all, and its deadline, the batch's earliest."""
        raise NotImplementedError

    def _observe_start(self) -> float | None:
        """The time an observed write starts at; None (no clock read) if nobody observes."""
        return None if self.on_write is None else time.perf_counter()

    def _observe(self, operation: str, start: float | None) -> None:
        if self.on_write is not None and start is not None:
            # An observer's bug must not fail a write that succeeded.
            with contextlib.suppress(Exception):
                self.on_write(operation, time.perf_counter() - start)


#: What a :class:`ThreadCall`'s docstring adds to its sync call's.
_ON_THREAD = (
    "Runs on the store thread. Cancellation: once queued, the call completes (bounded by the "
    "store's timeout), and ``Cancelled`` is raised at the caller's next checkpoint."
)


#: The paging arguments of a store's reads, by name: the least each may be, and the most that
#: is bound as it is (past it, the most: no store holds more rows, bytes or indexes).
_PAGING = {
    "limit": (0, MAX_INT64),
    "batch_size": (1, MAX_INT64),
    "start": (0, MAX_INDEX),
    "after": (-1, MAX_INDEX),
    "max_bytes": (0, MAX_INT64),
    "results_up_to": (0, MAX_INT64),
}


def check_paging(kwargs: dict[str, Any]) -> None:
    """Check and bound the paging arguments among ``kwargs`` in place, the same for every
    backend: a non-int is a TypeError, one below its least a ValueError, one past the most
    a store binds is that most. ``after`` and ``start`` below their least read from the
    start. 2**63 raised OverflowError binding it in SQLite, and "bigint out of range" (a
    StoreUnavailable, which reads as worth a retry) in PostgreSQL; a NaN batch_size passed
    "batch_size < 1"."""
    for name, (least, most) in _PAGING.items():
        value = kwargs.get(name)
        if value is None:
            continue
        if name in ("after", "start"):
            kwargs[name] = max(least, min(check_whole(name, value, low=None, high=None), most))
        else:
            kwargs[name] = min(check_whole(name, value, low=least, high=None), most)


class ThreadCall(Generic[S, P, T]):
    """An operation of a face that is one call of its sync store, as it is:
    ``get_job = ThreadCall(Store.get_job)`` makes ``face.get_job(job_id, now=now)`` await
    ``face._on_thread(Store.get_job, job_id, now=now)``.

    The method has ``fn``'s parameters after the store, typed (mypy checks its callers, and
    the face against the store protocols, through them), and its docstring; a ``fn`` of
    another backend's store is a type error. Cancellation: as :meth:`StoreFace._on_thread`.
    """

    def __init__(self, fn: Callable[Concatenate[S, P], T]) -> None:
        signature = inspect.signature(fn)
        paged = not _PAGING.keys().isdisjoint(signature.parameters)

        async def call(face: StoreFace[S], /, *args: P.args, **kwargs: P.kwargs) -> T:
            if paged:  # by name, however they are passed
                bound = signature.bind(None, *args, **kwargs)
                check_paging(bound.arguments)
                return await face._on_thread(fn, *bound.args[1:], **bound.kwargs)
            return await face._on_thread(fn, *args, **kwargs)

        store, *params = signature.parameters.values()
        call.__dict__["__signature__"] = signature.replace(
            parameters=[store.replace(name="self", annotation=inspect.Parameter.empty), *params]
        )
        call.__doc__ = f"{inspect.cleandoc(fn.__doc__ or '')}\n\n{_ON_THREAD}"
        self._call = call

    def __set_name__(self, owner: type, name: str) -> None:
        self._call.__name__ = name
        self._call.__qualname__ = f"{owner.__qualname__}.{name}"
        self._call.__module__ = owner.__module__

    @overload
    def __get__(
        self, face: None, owner: type | None = None
    ) -> Callable[Concatenate[StoreFace[S], P], Coroutine[Any, Any, T]]: ...

    @overload
    def __get__(
        self, face: StoreFace[S], owner: type | None = None
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    # Any other object, such as the face of another backend: None, so that a ThreadCall of
    # another store's function fails the type check where the face is used as a JobStore.
    @overload
    def __get__(self, face: object, owner: type | None = None) -> None: ...

    def __get__(self, face: object, owner: type | None = None) -> Any:
        return self._call if face is None else MethodType(self._call, face)
