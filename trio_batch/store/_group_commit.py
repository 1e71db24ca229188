"""Group commit: outcome writes that are ready at the same moment share one commit.

Backends use it to turn N concurrent drains' outcome writes into one transaction, each write
atomic on its own (SQLite: a compare-and-set that writes nothing when it misses, or a
savepoint; PostgreSQL: one statement), while every drain still waits for its own outcome to
be committed before it fetches its next target.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

from .._errors import StoreUnavailable

__all__ = ["REGATHER_SKIPS", "GroupCommit"]

#: After two second gathering yields in a row that nobody joined, the chances a leader skips
#: it (see :meth:`GroupCommit.write`): each costs its commit a pass of the scheduler.
REGATHER_SKIPS = 64

W = TypeVar("W")
A = TypeVar("A")


@dataclass(eq=False, slots=True)
class _Pending(Generic[W, A]):
    write: W
    writer: Hashable
    task: trio.lowlevel.Task | None = None  # a follower waiting for the leader's commit
    answer: object = None  # A or an Exception, set by the leader before it wakes anyone


def _no_abort(_: object) -> trio.lowlevel.Abort:
    """A follower's cancel: refused, the leader is committing its write (wait for that)."""
    return trio.lowlevel.Abort.FAILED


class GroupCommit(Generic[W, A]):
    """Batches writes into shared commits made by ``commit``.

    ``commit(writes)`` stores a batch in one transaction and returns one answer per write, in
    order: the write's own result, or the exception that refused that write alone (such a write
    changed nothing). If it raises, the whole batch failed and every writer gets that error.
    It must run to completion once called (not be cancellable): a store thread call is.
    """

    def __init__(self, commit: Callable[[list[W]], Awaitable[list[A | Exception]]]) -> None:
        self._commit = commit
        self._batch: list[_Pending[W, A]] = []
        # The writer whose write was alone in the last commit; None if there were several.
        self._sole_writer: Hashable | None = None
        # Writers the last commit woke that have not resumed yet: trio runs them in the next
        # pass of its scheduler, before or after whoever leads the next commit.
        self._waking = 0
        # Set when the commit in flight (awaiting its thread or socket) is known; None if none
        # is. The next leader waits for it, gathering meanwhile: a backend runs its commits
        # one at a time anyway, and many small ones queued behind each other cost a round trip
        # and a transaction each.
        self._in_flight: trio.Event | None = None
        # Chances to skip the second gathering yield (see _regather) before trying it again,
        # and the second yields in a row that gathered nobody.
        self._regather_skips = 0
        self._regather_misses = 0

    @trio.lowlevel.enable_ki_protection  # part of write, as protected as it is
    async def _regather(self) -> None:
        """A leader that resumed ahead of the writers the last commit woke: yield once more,
        for them to join, unless two such yields in a row found nobody within the last
        ``REGATHER_SKIPS`` chances (their fetches yield: they are not in step)."""
        if self._regather_skips:
            self._regather_skips -= 1
            return
        before = len(self._batch)
        await trio.lowlevel.cancel_shielded_checkpoint()
        if len(self._batch) > before:
            self._regather_misses = 0
            return
        self._regather_misses += 1  # once, as at a job's end, is not a pattern: twice is
        if self._regather_misses >= 2:
            self._regather_misses = 0
            self._regather_skips = REGATHER_SKIPS

    def alone(self, writer: Hashable) -> bool:
        """True if ``writer`` may commit its write at once, by itself, without :meth:`write`:
        it was alone in the last commit, and nobody else is writing, waiting or waking.

        A backend that commits such a write on the spot, without yielding, keeps what
        :meth:`write` guarantees (it would not have yielded either) with less in between.
        """
        return (
            writer == self._sole_writer
            and not self._batch
            and self._in_flight is None
            and not self._waking
        )

    # Protected from KeyboardInterrupt: raised between the leader taking its batch and the
    # block that wakes the followers, it would leave them waiting for good (they cannot be
    # cancelled), and shutdown with them. Held back, it arrives at the main task's next
    # checkpoint; a write is bounded by the store's timeouts.
    @trio.lowlevel.enable_ki_protection
    async def write(self, write: W, *, writer: Hashable) -> A:
        """Commit ``write`` with whatever else is ready now; return or raise its own answer.

        The first write in becomes the leader: it yields once so that every drain with an
        outcome ready joins, then, once the commit in flight (if any) is known, commits them
        all; the others wait for it. So while a commit awaits its thread or socket, the writes
        that come meanwhile gather into the next one instead of each queuing a commit of its
        own behind it. trio runs the tasks of a pass in either order, so a leader may resume
        ahead of the writers the last commit woke, which may be about to write again (drains
        in step, with fetches that do not yield): it then yields a second time, for them to
        join (its commit would otherwise hold its write alone, and theirs follow without it).
        Where that yield gathers nobody twice in a row (their fetches yield), the next
        ``REGATHER_SKIPS`` leaders do not make it: under load a pass is long, and it delays
        the commit by one.

        ``writer`` names who writes (a drain: its job's id). A writer that was alone in the last
        commit does not yield to gather, unless writers woken by a commit have yet to resume:
        nobody else is writing, and the yield cost a pass of trio's scheduler per outcome, 5%
        of a serial drain's time. Its call is then no schedule point. The commit itself yields
        when it awaits a thread or a socket, and the SQLite fast path bounds the loop time
        such calls take in one pass (:class:`~trio_batch._loop_budget.LoopBudget`; in a
        trio run the budget does not guard, it yields after each write).

        Cancellation: this call cannot be cancelled. It returns (or raises) once the write is
        committed or has failed, and a pending ``Cancelled`` is raised at the caller's next
        checkpoint.
        """
        pending: _Pending[W, A] = _Pending(write, writer)
        self._batch.append(pending)
        if len(self._batch) == 1:
            if writer != self._sole_writer or self._waking:
                await trio.lowlevel.cancel_shielded_checkpoint()
                if self._waking:  # ahead of the writers the last commit woke
                    await self._regather()
            while self._in_flight is not None:  # one commit in flight: wait for it, gathering
                with trio.CancelScope(shield=True):  # bounded by that commit's own timeouts
                    await self._in_flight.wait()
            batch, self._batch = self._batch, []
            self._sole_writer = writer if len(batch) == 1 else None
            answers: list[A | Exception] | None = None
            in_flight = self._in_flight = trio.Event()
            try:
                answers = await self._commit([member.write for member in batch])
            except Exception as exc:
                answers = [exc] * len(batch)
            finally:
                self._in_flight = None
                in_flight.set()
                # Followers cannot be cancelled, so they must be woken whatever happens here
                # (a KeyboardInterrupt included).
                if answers is None:
                    interrupted = StoreUnavailable(
                        "the write was interrupted before its commit was known"
                    )
                    answers = [interrupted] * len(batch)
                for member, answer in zip(batch, answers, strict=True):
                    member.answer = answer
                    if member.task is not None:
                        self._waking += 1
                        trio.lowlevel.reschedule(member.task)
        else:
            pending.task = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(_no_abort)
            self._waking -= 1  # woken by the leader only: the abort above never succeeds
        if isinstance(pending.answer, Exception):
            raise pending.answer
        return pending.answer  # type: ignore[return-value]  # an A (no cast: a call per write)
