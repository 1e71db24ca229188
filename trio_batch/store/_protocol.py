"""The store interface: every operation the runner and the front ends need from a backend.

A backend is one class that implements :class:`JobStore` (SQLite in :mod:`.sqlite`); one that
several runners share implements :class:`ClusterStore` too (PostgreSQL in :mod:`.postgres`). The
runner, the command line and the HTTP service only ever call these methods, so a new backend
plugs in by implementing them and teaching :func:`~trio_batch.open_store` its URL scheme; the
conformance suite (``tests/test_store_conformance.py``) runs every backend through the same
checks.

Every method is a single, atomic step: it completes entirely or changes nothing. Times are Unix
epoch seconds passed in as ``now`` (the runner's injected wall clock), never read inside.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from .._event import Delivery, JobEvent
from .._model import Job, JobState, OutcomeWrite, Target, TargetStatus
from ._filters import EVERY_JOB, JobFilter
from ._values import (
    Admission,
    DrainChanges,
    NewJob,
    ReapedJob,
    ReapObserver,
    StoreCounts,
)

__all__ = [
    "Admission",
    "ChangeObserver",
    "ClusterStore",
    "DrainChanges",
    "JobStore",
    "NewJob",
    "ReapObserver",
    "ReapedJob",
    "StoreCounts",
    "WriteObserver",
    "cluster_of",
]

WriteObserver = Callable[[str, float], None]
"""Called on the event loop with ``(operation, seconds)`` after each job creation
(``"create_job"``) and each outcome commit (``"record_outcomes"``, once per group commit)."""

ChangeObserver = Callable[[frozenset[str] | None], None]
"""Called on the event loop with the ids of jobs that some runner changed (see
:meth:`ClusterStore.listen_changes`), or None when such changes may have been missed."""


@runtime_checkable
class JobStore(Protocol):
    """The operations a store backend provides, as async methods for one trio program.

    Cancellation: a call that has started writing completes (it cannot be abandoned half-way;
    the backend runs it to its end) and ``Cancelled`` is raised at the caller's next checkpoint.
    Every call is bounded by the backend's own timeouts. A database that refuses a call raises
    :class:`~trio_batch.StoreUnavailable`, having changed nothing.
    """

    #: Where the store is, for messages (a path, or a URL without its password).
    location: str
    #: See :data:`WriteObserver`; None for no observer.
    on_write: WriteObserver | None
    #: See :data:`ReapObserver`; None for no observer.
    on_reaped: ReapObserver | None

    def claim(
        self, *, heartbeat_interval: float = 5.0, runner_timeout: float = 30.0
    ) -> AbstractAsyncContextManager[None]:
        """Claim the database for one runner for the duration of the block.

        Raises :class:`~trio_batch.StoreLocked` at once where the backend allows one runner only
        and another holds it. The claim ends with the block, and with the process if it dies.
        Where runners share the database, the runner heartbeats every ``heartbeat_interval``
        seconds meanwhile, and one silent for ``runner_timeout`` is taken for dead.
        """
        ...

    async def create_job(self, new: NewJob, *, now: float) -> tuple[Job, bool]:
        """Return the reusable job of ``(new.caller, new.targets)``, or check the caps and
        create one.

        One atomic, serialised step (see :meth:`trio_batch.Store.create_job` for the rules):
        returns ``(job, reused)``; raises :class:`~trio_batch.TooManyTargets`,
        :class:`~trio_batch.CallerBusy` or :class:`~trio_batch.Busy`, writing nothing.
        With ``new.webhook_url`` or ``new.callback`` (``Config.on_terminal``) a new job
        gets an outbox row in the same transaction: whichever write makes the job terminal
        (its last outcome, :meth:`finish_job`, a reap, a shutdown) writes its
        :class:`~trio_batch.JobEvent` there in its own transaction. A reused job keeps its own.
        """
        ...

    async def record_outcome(self, write: OutcomeWrite, *, ttl: float, now: float) -> Job | None:
        """Store one target's outcome and bump its job's lease, in one transaction.

        Sets the job's terminal status in the same transaction when this is its last outcome.
        Returns the job as stored, or None if the job is unknown, lapsed or (with several
        runners) no longer this runner's: nothing is written then. Raises
        :class:`~trio_batch.OutcomeExists` if the target already has an outcome. Writes that
        are ready together may share one commit (group commit); each stays all-or-nothing on
        its own, and this returns once its own is committed.
        """
        ...

    async def finish_job(
        self, job_id: str, status: JobState, *, now: float, error: str | None = None
    ) -> Job | None:
        """Move a live job to the terminal ``status`` once; None if unknown, lapsed or terminal."""
        ...

    async def reap_orphans(self, *, now: float) -> Sequence[ReapedJob]:
        """Fail (error ``"restart"``) the live jobs whose runner is gone; returns them, with
        their trace contexts, read in the same transaction.

        Called when a runner starts. Such jobs are never resumed; their stored outcomes stay
        readable until their lease lapses.
        """
        ...

    async def fail_own_jobs(self, reason: str, *, now: float) -> int:
        """Fail (error ``reason``) the live jobs this runner is draining; returns how many.

        Called at shutdown with ``"shutdown"``. Never touches another runner's jobs.
        """
        ...

    async def purge_expired(self, *, now: float, batch_size: int) -> int:
        """Delete at most ``batch_size`` lapsed jobs with their targets, in one short transaction.

        Returns how many were deleted; fewer than ``batch_size`` means none are left.
        """
        ...

    async def forget_job(self, job_id: str, *, caller: str | None = None, now: float) -> Job | None:
        """Delete a terminal job and its targets at once, in one transaction; returns the job.

        None (and nothing deleted) if the job is unknown, lapsed, or, with ``caller``, another
        caller's. A live job is not deleted: :class:`~trio_batch.JobLive` is raised.
        """
        ...

    async def get_job(self, job_id: str, *, now: float) -> Job | None:
        """The job, or None if the id is unknown, malformed or its lease has lapsed."""
        ...

    async def get_status(self, job_id: str, *, now: float) -> tuple[Job, list[TargetStatus]] | None:
        """The job and its targets in order, from one snapshot; the one due reads ``running``."""
        ...

    async def get_overview(
        self, job_id: str, *, now: float
    ) -> tuple[Job, list[TargetStatus], list[int]] | None:
        """The job and its targets without their results (``result`` None), with each
        result's size in characters (0 without one), from one snapshot; None as ``get_job``.
        Nothing of a result is read, so it costs the same however big the results are."""
        ...

    async def get_target(
        self, job_id: str, idx: int, *, now: float
    ) -> tuple[Job, TargetStatus] | None:
        """The job and one target with its result (``running`` if due next); None if the job
        is unknown, malformed or lapsed, or has no target ``idx``."""
        ...

    async def get_outcomes(
        self,
        job_id: str,
        start: int,
        *,
        now: float,
        limit: int,
        max_bytes: int | None = None,
        results_up_to: int | None = None,
    ) -> tuple[Job, list[TargetStatus]] | None:
        """The job and, in ``idx`` order, up to ``limit`` of its targets from ``start`` on that
        have an outcome (``done`` or ``failed``), with their results, from one snapshot; None
        as ``get_job``. What a watcher reads: only what it has not seen, so following a job
        costs each outcome one read however many targets the job has.

        ``max_bytes``: as :meth:`get_targets_after`'s, the page also ends with the target
        whose result takes the page's results past this size (the first target always
        comes), so a page of big results holds about ``max_bytes``, not ``limit`` of them.
        ``results_up_to``: a result of more characters than that is not read; its target
        comes with ``result`` None and the result's length in ``result_size``."""
        ...

    async def list_jobs(
        self, *, now: float, caller: str | None = None, limit: int = 100
    ) -> list[Job]:
        """Unexpired jobs, most recently active first; only ``caller``'s if given."""
        ...

    async def list_caller_jobs(
        self,
        caller: str,
        *,
        now: float,
        limit: int,
        before: tuple[float, str] | None = None,
        where: JobFilter = EVERY_JOB,
    ) -> list[Job]:
        """One page of ``caller``'s unexpired jobs, newest first (by ``created_at``, then id),
        only those ``where`` lists (by default all): read off an index, so a page costs about
        the same however many jobs the caller has.

        ``before`` is the ``(created_at, id)`` of the last job of the previous page: the page
        starts after it, so pages neither repeat nor skip jobs while others are created.
        """
        ...

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
        """The job and, in ``idx`` order, up to ``limit`` of its targets with an index above
        ``after`` (``-1`` for the first page), outcome or not, with their results, from one
        snapshot (the one due next reads ``running``); None as ``get_job``. What an export
        reads: page after page, so its memory is one page's whatever the job's size.

        ``max_bytes``: the page also ends with the target whose result takes the page's
        results past this size (the first target always comes), so a page's memory is bounded
        by size, not only by count, and no result past it is read: SQLite counts characters
        as it reads each row, PostgreSQL the stored bytes, summed in the query.
        ``results=False``: every ``result`` reads as None and none is loaded (a read that
        needs the statuses only)."""
        ...

    async def latest_retry(self, job_id: str, *, caller: str, now: float) -> Job | None:
        """The newest unexpired job of ``caller`` whose ``parent_id`` is ``job_id``, or None."""
        ...

    async def retries(self, job_id: str, *, caller: str, now: float, limit: int) -> list[Job]:
        """At most ``limit`` unexpired jobs of ``caller`` whose ``parent_id`` is ``job_id``,
        newest first (by ``created_at``, then id)."""
        ...

    async def counts(self, *, now: float) -> StoreCounts:
        """Unexpired jobs by status, and their targets' counts."""
        ...

    async def claim_delivery(
        self, *, now: float, lease: float, skip_urls: Collection[str] = ()
    ) -> JobEvent | None:
        """Lease the terminal event due first for this runner until ``now + lease``; None if
        no event is due. No other runner takes an event while its lease lasts, unless the
        lease holder is gone (then at once where that is known). An event whose webhook URL
        is one of ``skip_urls`` (destinations the runner has enough attempts in flight to),
        or begins with one followed by ``/``, ``?`` or ``#``, is passed over, so one slow
        receiver cannot hold every delivery slot, even with a URL per job."""
        ...

    async def record_delivery(
        self,
        event: JobEvent,
        *,
        answer: str,
        delivered: bool,
        now: float,
        next_at: float | None,
    ) -> bool:
        """Record one attempt at ``event`` (leased by :meth:`claim_delivery`) and end the
        lease: delivered, or due again at ``next_at``, or (``next_at`` None) given up.
        False, writing nothing, if the lease is no longer this runner's."""
        ...

    async def get_delivery(self, job_id: str, *, now: float) -> Delivery | None:
        """The delivery state of an unexpired job's terminal event; None without one."""
        ...

    async def redeliver(self, job_id: str, *, now: float) -> Delivery | None:
        """Make the job's written event due again now, a new round of attempts with the same
        event id; None if the job has no written event. An attempt in flight (its lease
        holds) keeps its lease: the new round joins it, and nothing is sent beside it."""
        ...

    async def next_delivery_due(self) -> float | None:
        """When the earliest waiting delivery is due (a ``now`` time), or for one in flight
        when its lease ends; None if none waits."""
        ...

    async def aclose(self) -> None:
        """Release the store's connections and threads; it answers no more calls."""
        ...


@runtime_checkable
class ClusterStore(Protocol):
    """What a store that several runners share adds to :class:`JobStore` (PostgreSQL).

    With one runner per database (SQLite) no other runner can cancel, reap, adopt or wait on
    this runner's jobs, so such a store does not implement these, and the runner skips what
    needs them (see :func:`cluster_of`).
    """

    def can_start_target(self) -> bool:
        """False while this runner may be about to be taken for dead by the others.

        The runner's heartbeat has not succeeded for most of
        ``runner_timeout``, so its jobs may be reaped at any moment; a drain starts no new
        target until this is True again (or its job is reaped)."""
        ...

    async def drain_changes(self, job_ids: Collection[str]) -> DrainChanges:
        """Which of ``job_ids`` (jobs this runner drains) other runners cancelled or reaped.

        The runner polls this every ``Config.poll_interval``.
        """
        ...

    async def undrained_jobs(
        self, draining: Collection[str], *, now: float, limit: int
    ) -> Sequence[tuple[Job, tuple[Target, ...]]]:
        """Up to ``limit`` live, unexpired jobs this runner owns with no outcome yet and does
        not drain (none of ``draining``), oldest first, each with its targets in order: creates
        whose answer was lost (the submit raised :class:`~trio_batch.StoreUnavailable`), for
        the runner's poll to adopt. A read: cancellation leaves nothing changed."""
        ...

    async def release_job(self, job_id: str) -> None:
        """Record that this runner's drain of the terminal job ``job_id`` has stopped.

        Called when a drain stops before its last target (a cancel, a failure), so that a
        runner waiting on the job elsewhere knows no outcome of it can follow (see
        :meth:`drain_over`)."""
        ...

    async def watch_job(self, job_id: str) -> bool:
        """Record that this runner waits on the job ``job_id``, which another drains, so
        that the runner which stores its last outcome tells this one's :meth:`listen_changes`
        at once (a cancelled job's too: its last outcome may still be in flight).

        Returns False if every outcome of the job is stored (or it is unknown): it may have
        ended before, untold, so it is to be read again. Idempotent.
        """
        ...

    async def drain_over(self, job_id: str) -> bool:
        """True if no runner other than this one may still write an outcome of ``job_id``.

        That is: no other runner drains it (its drain stopped, or its runner is gone). A job
        whose last outcome is stored counts as over.
        False for a job the store does not find (forgotten or purged since the caller read
        it): the caller reads the job again, rather than answer with the job it read.
        """
        ...

    async def listen_changes(self, on_change: ChangeObserver) -> None:
        """Until cancelled: call ``on_change`` (on the event loop) with the ids of jobs that a
        runner cancelled, released or reaped, or finished while watched (:meth:`watch_job`),
        as soon as the database tells.

        ``on_change(None)``: changes may have been missed (the listener has just connected or
        reconnected), so whatever is waited on should be read again. Notifications can be lost:
        the runner's poll stays the fallback. Returns at once where listening is off.
        Cancellation: stops at once.
        """
        ...


@runtime_checkable
class HostLimits(Protocol):
    """Per-host request limits kept in a store that several runners share (PostgreSQL).

    The fetcher's seam for politeness across runners: a slot per request in flight to a host
    (leased, so a killed runner's slots expire), and a host-wide pause. Times are seconds;
    each call is bounded by the store's deadline (past it, :class:`~trio_batch.StoreError`).
    """

    async def acquire_host_slot(
        self, host: str, slot: str, *, cap: int, rate: float | None, lease: float
    ) -> float | None:
        """Take one of ``host``'s ``cap`` slots, named ``slot`` (the caller's unique id), for
        ``lease`` seconds: None; or the seconds to wait (a pause, the rate; 0: the host is
        full) before asking again, no slot taken."""
        ...

    async def release_host_slot(self, slot: str) -> None:
        """Give back a slot (idempotent)."""
        ...

    async def pause_host(self, host: str, seconds: float) -> None:
        """Pause ``host`` for every runner ``seconds`` from now, unless it is paused longer."""
        ...


def cluster_of(store: object) -> ClusterStore | None:
    """``store`` as a :class:`ClusterStore` if it is one (its runners share the database);
    None for a store of one runner."""
    return store if isinstance(store, ClusterStore) else None
