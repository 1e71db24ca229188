"""Group commit: outcome writes that queue behind the commit in flight share the next one.

A backend runs its commits one at a time on its store thread. While one is in flight, the
writes that arrive gather into a batch, and the batch is committed as one transaction as soon
as the commit before it is known, each write atomic on its own (a savepoint on SQLite, one
statement on PostgreSQL). A write that finds nothing in flight is committed at once, alone.
So a lone drain pays one commit per outcome and no wait, and N drains whose outcomes arrive
while a commit runs pay one commit between them. Nothing here depends on the order in which
trio runs its tasks: whichever write comes first into an empty batch leads it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import trio

from .._errors import StoreUnavailable

__all__ = ["GroupCommit"]

W = TypeVar("W")
A = TypeVar("A")


@dataclass(eq=False, slots=True)
class _Batch(Generic[W, A]):
    writes: list[W] = field(default_factory=list)
    answers: list[A | Exception] = field(default_factory=list)
    done: trio.Event = field(default_factory=trio.Event)


class GroupCommit(Generic[W, A]):
    """Batches writes into shared commits made by ``commit``.

    ``commit(writes)`` stores a batch in one transaction and returns one answer per write, in
    order: the write's own result, or the exception that refused that write alone (such a
    write changed nothing). If it raises, the whole batch failed and every writer gets that
    error. It must run to completion once called (a store thread call does) and be bounded
    by the backend's timeouts.
    """

    def __init__(self, commit: Callable[[list[W]], Awaitable[list[A | Exception]]]) -> None:
        self._commit = commit
        self._gathering: _Batch[W, A] | None = None  # waits for the commit in flight
        self._in_flight: trio.Event | None = None  # set when the commit in flight is known

    # Protected from KeyboardInterrupt: raised between a leader taking its batch and the
    # block that wakes the others, it would leave them waiting for good. Held back, it
    # arrives at the main task's next checkpoint; a commit is bounded by the store's timeouts.
    @trio.lowlevel.enable_ki_protection
    async def write(self, write: W) -> A:
        """Commit ``write`` with the writes gathered beside it; return or raise its answer.

        The first write into an empty batch leads it: once the commit in flight (if any) is
        known, it commits the batch; the others wait for that.

        Cancellation: this call cannot be cancelled (a write may be committing); it returns
        or raises once its commit is known, and a pending ``Cancelled`` is raised at the
        caller's next checkpoint.
        """
        batch = self._gathering
        leads = batch is None
        if batch is None:
            batch = self._gathering = _Batch()
        index = len(batch.writes)
        batch.writes.append(write)
        with trio.CancelScope(shield=True):  # bounded by the commits' own timeouts
            if not leads:
                await batch.done.wait()
            else:
                while self._in_flight is not None:
                    await self._in_flight.wait()
                self._gathering = None  # writes from now on gather into the next batch
                self._in_flight = batch.done
                answers: list[A | Exception] | None = None
                try:
                    answers = await self._commit(batch.writes)
                except Exception as exc:
                    answers = [exc] * len(batch.writes)
                finally:
                    if answers is None:  # a BaseException: the others still need an answer
                        lost = StoreUnavailable("the write was interrupted before its commit")
                        answers = [lost] * len(batch.writes)
                    batch.answers = answers
                    self._in_flight = None
                    batch.done.set()
        answer = batch.answers[index]
        if isinstance(answer, Exception):
            raise answer
        return answer
