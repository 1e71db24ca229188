"""The SQLite backend's :class:`~trio_batch.store.JobStore`: the event loop never waits on SQLite.

It sits on :class:`~trio_batch.store.sqlite._paths.FastPaths`, which reaches the store by
three paths: the fast path on the loop thread, the store thread, and a side thread beside a
checkpoint.

Outcome writes are grouped (:class:`~trio_batch.store._face.StoreFace`, which both backends
share): drains whose outcomes are ready at the same moment share one transaction, each write
atomic on its own (a write whose job is as seen writes nothing unless it all holds; the
others in a savepoint).
"""

from __future__ import annotations

import contextlib
import functools
import math
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Collection, Sequence

import trio

from ..._errors import BatchError
from ..._event import Delivery, JobEvent
from ..._model import Job, JobState, OutcomeWrite, Target, TargetStatus
from .._filters import EVERY_JOB, JobFilter
from .._protocol import (
    DECLINED,
    Admission,
    ChangeObserver,
    Declined,
    DrainChanges,
    NewJob,
    ReapedJob,
    StoreCounts,
    Stored,
)
from . import _fast_path, _outbox
from ._errors import translated
from ._fast_path import MISS, cheap_result
from ._lock import RunnerLock
from ._paths import FastPaths
from ._store import Store, admitted
from ._views import job_overview, latest_retry, one_target, outcomes_from, retries, targets_after

__all__ = ["SQLiteJobStore"]

_NO_CHANGES = DrainChanges()


class SQLiteJobStore(FastPaths):
    """A :class:`~trio_batch.Store` (one SQLite database) as a :class:`~trio_batch.JobStore`.

    Get one from :func:`~trio_batch.open_store`, or wrap a store you opened yourself:
    ``SQLiteJobStore(Store.open(path))`` (``open_runner`` does that for a plain ``Store``).
    The store thread and the fast-path connection start at the first call, from inside a trio
    run; :meth:`aclose` them. ``owns_store=True`` closes the ``Store`` too.

    One runner per database: :meth:`claim` takes a file lock beside it (see
    :class:`~trio_batch.store.sqlite._lock.RunnerLock`).
    """

    def __init__(self, store: Store, *, owns_store: bool = False) -> None:
        super().__init__(store, owns_store=owns_store)
        # Leases on outbox rows: another owner's is a dead process's (one runner per file).
        self._owner = secrets.token_urlsafe(9)
        # The write record_outcome_now last declined: record_outcome does not offer it again.
        self._declined: OutcomeWrite | None = None

    @contextlib.asynccontextmanager
    async def claim(
        self, *, heartbeat_interval: float = 5.0, runner_timeout: float = 30.0
    ) -> AsyncIterator[None]:
        """Hold the database's runner lock for the block; :class:`StoreLocked` if taken.

        One runner per database, whose death the kernel reports by dropping the lock: the
        heartbeat timings are not needed.
        """
        lock = RunnerLock(self.store)
        lock.acquire()
        try:
            yield
        finally:
            lock.release()

    # ----------------------------------------------------------------------------------------
    # JobStore

    async def admit(self, want: Admission, *, now: float) -> Job | None:
        """:meth:`Store.admit`, on the fast path if this pass has room; answering None there,
        it does not yield (the create that follows does)."""
        row, fast = await self._fast_else_off_loop(0, Store.admission_row, (want,), {"now": now})
        try:
            job = admitted(want, row)
        except BatchError:
            if fast:  # a refusal ends the submit: it yields, as an async call does
                await trio.lowlevel.cancel_shielded_checkpoint()
            raise
        if fast and job is not None:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return job

    async def create_job(self, new: NewJob, *, now: float) -> tuple[Job, bool]:
        """:meth:`Store.create_job`; on the fast path when the job is small (an admitted one
        without waiting for room in the pass: its :meth:`admit` did)."""
        create = functools.partial(Store.create_job, new=new, now=now)
        start = self._observe_start()
        if len(new.targets) <= _fast_path.FAST_MAX_TARGETS:
            # One write toward the next checkpoint. An admitted request's admission read waited
            # for room in the pass just before: a submit waits once, as when create read first.
            answer, fast = await self._fast_else_off_loop(1, create, (), {}, wait=not new.admitted)
            if fast:
                await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            answer = await self._on_thread(create)
        self._observe("create_job", start)
        return answer

    async def record_outcome(
        self, write: OutcomeWrite, *, ttl: float, now: float
    ) -> Job | Stored | None:
        """Store one outcome, as :meth:`StoreFace.record_outcome
        <trio_batch.store._face.StoreFace.record_outcome>` does: on the spot if
        :meth:`record_outcome_now` takes it, or once a later pass of the loop has room if only
        the room was missing; else with the group commit.

        A write :meth:`record_outcome_now` has just declined (a drain asks it first, then
        makes this call at once) is not offered again: it would be declined again.
        """
        if write is self._declined:
            self._declined = None
            answer: Job | Stored | Declined | None = DECLINED
        else:
            answer = self.record_outcome_now(write, ttl=ttl, now=now)
        if isinstance(answer, Declined) and self._budget.spent and self._group.alone(write.job_id):
            # The group commit would wait for that room too, through eight more calls. (Not
            # beside other writers: waiting here, this one would miss their commit.)
            await self._ready_for_fast_call()
            answer = self._write_alone(write, ttl, now)
        if isinstance(answer, Declined):
            self._start()  # StoreFace.record_outcome's, without its coroutine in between
            return await self._group.write((write, ttl, now, math.inf), writer=write.job_id)
        return answer

    def record_outcome_now(
        self, write: OutcomeWrite, *, ttl: float, now: float
    ) -> Job | Stored | Declined | None:
        """Store one outcome synchronously, on the fast path, if this pass of the loop has
        room, the writer is alone (:meth:`GroupCommit.alone
        <trio_batch.store._group_commit.GroupCommit.alone>`) and the result small; else
        :data:`DECLINED`, nothing written. The group commit would have committed such a write
        alone without yielding too, through eight more calls.
        """
        answer = DECLINED if self._budget.spent else self._write_alone(write, ttl, now)
        if answer is DECLINED:
            self._declined = write
        return answer

    # Protected from KeyboardInterrupt, as _try_fast is: between its BEGIN and its COMMIT.
    @trio.lowlevel.enable_ki_protection
    def _write_alone(
        self, write: OutcomeWrite, ttl: float, now: float
    ) -> Job | Stored | Declined | None:
        """:meth:`record_outcome_now` whatever this pass has used of the loop's budget.

        :meth:`_try_fast` of :meth:`Store.record_write`, flattened, as a serial drain takes it
        once per outcome: the checks in one expression, the write on the fast connection
        without the keyword call, the transaction block or a second lock
        (:func:`_fast_path.write_alone`), the same transaction and answer."""
        fast, budget, result = self._fast, self._budget, write.result
        if (
            not self._group.alone(write.job_id)  # first: beside other writers, decided at once
            or fast is None
            or not budget.guards_this_run
            or (result is not None and not cheap_result(result))
            or not fast._lock.acquire(blocking=False)
        ):
            return DECLINED
        beside = self._checkpoint_pending
        if beside and not self._room_beside_copy(1):
            fast._lock.release()
            return DECLINED
        observed = None if self.on_write is None else time.perf_counter()
        started = time.perf_counter()
        try:
            answer = _fast_path.write_alone(fast, write, ttl, now)
        except sqlite3.Error as exc:  # translate_errors's, without a block around every write
            raise translated(exc, self.store.busy_timeout) from exc
        finally:
            fast._lock.release()
            budget.used += time.perf_counter() - started
        if answer is MISS:
            return DECLINED
        if not beside:
            self._count_writes(1)
        if observed is not None:
            self._observe("record_outcomes", observed)
        return answer  # type: ignore[return-value]  # not MISS: `is`, no isinstance call

    async def _store_outcomes(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float, deadline: float = math.inf
    ) -> list[Job | Stored | Exception | None]:
        """:meth:`Store.record_outcomes`: on the fast path when every result is small.
        ``deadline`` is not read: each call is bounded by the busy timeout."""
        fast = True
        for w in writes:  # a loop, not all(): most batches hold one write
            if w.result is not None and not cheap_result(w.result):
                fast = False
                break
        answers, ran_fast = await self._fast_else_off_loop(
            len(writes),
            Store.record_outcomes,
            (writes,),
            {"ttl": ttl, "now": now},
            try_fast=fast,
        )
        if ran_fast and not self._budget.guards_this_run:
            # A drain alone in its commits skips the group commit's gathering yield, counting
            # on the budget to end the pass; in a run the budget does not guard, nothing else
            # would: a fetch that never yields would hold the loop for the whole job.
            await trio.lowlevel.cancel_shielded_checkpoint()
        return answers

    async def finish_job(
        self, job_id: str, status: JobState, *, now: float, error: str | None = None
    ) -> Job | None:
        """:meth:`Store.finish_job`."""
        return await self._call(1, Store.finish_job, job_id, status, error=error, now=now)

    async def reap_orphans(self, *, now: float) -> list[ReapedJob]:
        """Fail every live job as ``"restart"``: with the claim held, no runner drains them."""
        return await self._on_thread(Store.fail_live, "restart", now)

    async def fail_own_jobs(self, reason: str, *, now: float) -> int:
        """Fail every live job: with the claim held, they are all this runner's."""
        return await self._on_thread(Store.mark_in_flight_failed, reason, now)

    def can_start_target(self) -> bool:
        """Always True: one runner per database, so nobody else can reap its jobs."""
        return True

    async def drain_changes(self, job_ids: Collection[str]) -> DrainChanges:
        """Empty, without a query: no other runner can cancel or reap this runner's jobs."""
        return _NO_CHANGES

    async def undrained_jobs(
        self, draining: Collection[str], *, now: float, limit: int
    ) -> list[tuple[Job, tuple[Target, ...]]]:
        """Empty, without a query: a create that raised was rolled back (one transaction on a
        local file, no answer to lose), so every live job has its drain or was reaped."""
        return []

    async def release_job(self, job_id: str) -> None:
        """Nothing to record: no other runner waits on this runner's drains."""

    async def watch_job(self, job_id: str) -> bool:
        """True, without a query: no other runner drains jobs in this database."""
        return True

    async def drain_over(self, job_id: str) -> bool:
        """True: no other runner drains jobs in this database."""
        return True

    async def listen_changes(self, on_change: ChangeObserver) -> None:
        """Returns at once: no other runner changes this runner's jobs."""

    async def purge_expired(self, *, now: float, batch_size: int) -> int:
        """One batch of :meth:`Store.purge_expired`, on the store thread."""
        return await self._on_thread(Store.purge_expired, now, batch_size=batch_size, max_batches=1)

    async def forget_job(self, job_id: str, *, caller: str | None = None, now: float) -> Job | None:
        """:meth:`Store.forget_job`, on the store thread (a delete may wait for the lock)."""
        return await self._on_thread(Store.forget_job, job_id, caller=caller, now=now)

    async def get_job(self, job_id: str, *, now: float) -> Job | None:
        """:meth:`Store.get_job`."""
        return await self._call(0, Store.get_job, job_id, now=now)

    async def get_status(self, job_id: str, *, now: float) -> tuple[Job, list[TargetStatus]] | None:
        """:meth:`Store.get_status`; on the fast path unless the job holds big results."""
        # On the loop only while the results are small: past that, all of it off the loop.
        answer, fast = await self._fast_else_off_loop(
            0,
            Store.get_status,
            (job_id,),
            {"now": now},
            fast_kwargs={"max_results_size": _fast_path.FAST_MAX_RESULTS},
        )
        if fast:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return answer

    async def list_jobs(
        self, *, now: float, caller: str | None = None, limit: int = 100
    ) -> list[Job]:
        """:meth:`Store.list_jobs`, on the store thread."""
        return await self._on_thread(Store.list_jobs, caller=caller, limit=limit, now=now)

    async def get_overview(
        self, job_id: str, *, now: float
    ) -> tuple[Job, list[TargetStatus], list[int]] | None:
        """:func:`job_overview`, on the store thread."""
        return await self._on_thread(job_overview, job_id, now=now)

    async def get_target(
        self, job_id: str, idx: int, *, now: float
    ) -> tuple[Job, TargetStatus] | None:
        """:func:`one_target`, on the store thread (a result may be large to decode)."""
        return await self._on_thread(one_target, job_id, idx, now=now)

    async def get_outcomes(
        self, job_id: str, start: int, *, now: float, limit: int
    ) -> tuple[Job, list[TargetStatus]] | None:
        """:func:`outcomes_from`, on the store thread (results may be large to decode)."""
        return await self._on_thread(outcomes_from, job_id, start, now=now, limit=limit)

    async def list_caller_jobs(
        self,
        caller: str,
        *,
        now: float,
        limit: int,
        before: tuple[float, str] | None = None,
        where: JobFilter = EVERY_JOB,
    ) -> list[Job]:
        """:meth:`Store.list_caller_jobs`, on the store thread."""
        return await self._on_thread(
            Store.list_caller_jobs, caller, now=now, limit=limit, before=before, where=where
        )

    async def get_targets_after(
        self,
        job_id: str,
        after: int,
        *,
        now: float,
        limit: int,
        max_bytes: int | None = None,
        results: bool = True,
    ) -> tuple[Job, list[TargetStatus]] | None:
        """:func:`targets_after`, on the store thread (results may be large to decode)."""
        return await self._on_thread(
            targets_after,
            job_id,
            after,
            now=now,
            limit=limit,
            max_bytes=max_bytes,
            results=results,
        )

    async def latest_retry(self, job_id: str, *, caller: str, now: float) -> Job | None:
        """:func:`latest_retry`, on the store thread."""
        return await self._on_thread(latest_retry, job_id, caller, now=now)

    async def retries(self, job_id: str, *, caller: str, now: float, limit: int) -> list[Job]:
        """:func:`retries`, on the store thread."""
        return await self._on_thread(retries, job_id, caller, now=now, limit=limit)

    async def counts(self, *, now: float) -> StoreCounts:
        """:meth:`Store.counts`, on the store thread."""
        return await self._on_thread(Store.counts, now=now)

    async def claim_delivery(
        self, *, now: float, lease: float, skip_urls: Collection[str] = ()
    ) -> JobEvent | None:
        """:func:`_outbox.claim_delivery`, on the store thread."""
        return await self._on_thread(
            _outbox.claim_delivery, self._owner, now=now, lease=lease, skip_urls=skip_urls
        )

    async def record_delivery(
        self,
        event: JobEvent,
        *,
        answer: str,
        delivered: bool,
        now: float,
        next_at: float | None,
    ) -> bool:
        """:func:`_outbox.record_delivery`, on the store thread."""
        return await self._on_thread(
            _outbox.record_delivery,
            event,
            self._owner,
            answer=answer,
            delivered=delivered,
            now=now,
            next_at=next_at,
        )

    async def get_delivery(self, job_id: str, *, now: float) -> Delivery | None:
        """:func:`_outbox.get_delivery`."""
        return await self._call(0, _outbox.get_delivery, job_id, now=now)

    async def redeliver(self, job_id: str, *, now: float) -> Delivery | None:
        """:func:`_outbox.redeliver`, on the store thread."""
        return await self._on_thread(_outbox.redeliver, job_id, now=now)

    async def next_delivery_due(self) -> float | None:
        """:func:`_outbox.next_due`."""
        return await self._call(0, _outbox.next_due)
