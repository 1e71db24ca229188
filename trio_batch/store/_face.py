"""What every backend's async face shares: group-committed outcome writes, the write observer,
and ``async with``.

A backend's :class:`~trio_batch.store.JobStore` subclasses :class:`StoreFace` and supplies
:meth:`StoreFace._store_outcomes` (one transaction for a batch of writes, one answer each) and
:meth:`StoreFace.aclose`; the rest of the protocol is its own.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Awaitable, Sequence
from typing import Protocol, Self

from .._model import Job, OutcomeWrite
from ._group_commit import GroupCommit
from ._protocol import DECLINED, Declined, ReapObserver, Stored, WriteObserver

__all__ = ["StoreFace", "StoreOutcomes", "TimedWrite"]

#: An outcome write with the lease length, the time it was made at, and the deadline of its
#: call (trio time: the write's commit, however long it waits for the one before, is known by
#: then; ``math.inf`` where the backend bounds each of its calls itself, as SQLite does).
TimedWrite = tuple[OutcomeWrite, float, float, float]


class StoreOutcomes(Protocol):
    """Stores a batch of writes in one transaction (see :meth:`StoreFace._store_outcomes`)."""

    def __call__(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float, deadline: float
    ) -> Awaitable[list[Job | Stored | Exception | None]]: ...


class StoreFace:
    """The shared part of a backend's async store; see the module docstring."""

    def __init__(self) -> None:
        #: See :data:`~trio_batch.store.WriteObserver`; None for no observer.
        self.on_write: WriteObserver | None = None
        #: See :data:`~trio_batch.store.ReapObserver`; None for no observer.
        self.on_reaped: ReapObserver | None = None
        self._group: GroupCommit[TimedWrite, Job | Stored | None] = GroupCommit(self._commit)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the store's connections and threads; it answers no more calls."""
        raise NotImplementedError

    def _start(self) -> None:
        """Ready the store for calls from this trio run (a backend may start threads here)."""

    async def record_outcome(
        self, write: OutcomeWrite, *, ttl: float, now: float
    ) -> Job | Stored | None:
        """Store one outcome, sharing a commit with the other outcomes ready now.

        Answers as the backend's ``record_outcomes`` does for it: the updated job,
        :data:`~trio_batch.store.STORED` (only for a write with ``stored_since``), None (the
        job is unknown or lapsed, or not this runner's: nothing written), or it raises the
        error that refused it (such as :class:`~trio_batch.OutcomeExists`).

        A drain alone in the last commit does not yield to gather others (see
        :meth:`GroupCommit.write`): the call may then return without a schedule point.

        Cancellation: this call cannot be cancelled; it returns (or raises) once the outcome is
        committed or has failed, and a pending ``Cancelled`` is raised at the caller's next
        checkpoint.
        """
        self._start()
        return await self._group.write((write, ttl, now, math.inf), writer=write.job_id)

    def record_outcome_now(
        self, write: OutcomeWrite, *, ttl: float, now: float
    ) -> Job | Stored | Declined | None:
        """Declines (:data:`~trio_batch.store.DECLINED`): a backend that can write an outcome
        synchronously overrides it (see :meth:`JobStore.record_outcome_now`)."""
        return DECLINED

    async def _commit(self, batch: list[TimedWrite]) -> list[Job | Stored | Exception | None]:
        return await self._commit_with(self._store_outcomes, batch)

    async def _commit_with(
        self, store_outcomes: StoreOutcomes, batch: list[TimedWrite]
    ) -> list[Job | Stored | Exception | None]:
        """One group commit's batch stored by ``store_outcomes`` (a backend with several
        connections passes the one of the batch's group), observed."""
        # One commit, one moment: the first write's (the leader's) ttl and time serve for all,
        # and its deadline, the batch's earliest.
        _, ttl, now, deadline = batch[0]
        start = self._observe_start()
        writes = [timed[0] for timed in batch]
        answers = await store_outcomes(writes, ttl=ttl, now=now, deadline=deadline)
        self._observe("record_outcomes", start)
        return answers

    async def _store_outcomes(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float, deadline: float
    ) -> list[Job | Stored | Exception | None]:
        """Store ``writes`` in one transaction, each all-or-nothing; one answer per write, by
        ``deadline`` (trio time; see :data:`TimedWrite`).

        Must run to completion once called (not be cancellable): see :class:`GroupCommit`.
        """
        raise NotImplementedError

    def _observe_start(self) -> float | None:
        """The time an observed write starts at; None (no clock read) if nobody observes."""
        return None if self.on_write is None else time.perf_counter()

    def _observe(self, operation: str, start: float | None) -> None:
        if self.on_write is not None and start is not None:
            # An observer's bug must not fail a write that succeeded.
            with contextlib.suppress(Exception):
                self.on_write(operation, time.perf_counter() - start)
