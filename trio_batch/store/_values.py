"""The values that cross the store interface (:mod:`._protocol`): a job to create, a submit's
admission, a job reaped, the counts, and other runners' changes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .._model import Job, JobState, Target

__all__ = [
    "Admission",
    "DrainChanges",
    "NewJob",
    "ReapObserver",
    "ReapedJob",
    "StoreCounts",
]


@dataclass(frozen=True, slots=True)
class NewJob:
    """A request to create a job: what the caller submits and the caps it must fit.

    The store checks it before any I/O (invalid targets or caller names raise
    :class:`~trio_batch.InvalidTargets` / :class:`~trio_batch.InvalidRequest`).
    """

    caller: str
    caller_class: str
    targets: Sequence[Target]
    #: Seconds the job and its results are kept after its latest write.
    ttl: float
    targets_per_job: int
    jobs_per_caller: int
    jobs_total: int
    #: ``queued``, or ``running`` for a caller that starts draining at once.
    status: JobState = JobState.QUEUED
    #: The id a new job gets (made with :func:`~trio_batch.new_job_id`); by default a fresh one.
    job_id: str | None = None
    #: The caller's labels (see :func:`~trio_batch.check_metadata`), stored with the job and
    #: once more per key for label filters; part of the idempotency key.
    metadata: Mapping[str, str] | None = None
    #: The job this one retries (see :meth:`~trio_batch.Runner.retry`); part of the key too.
    parent_id: str | None = None
    #: Where the job's terminal event is sent (checked by the runner's webhook sender).
    webhook_url: str | None = None
    #: Whether ``Config.on_terminal`` is told of the job's end.
    callback: bool = False
    #: The job's span as a W3C ``traceparent`` (see :func:`check_trace_context`), stored with
    #: the job so that the runner that reaps it, or delivers its webhook, continues its trace.
    trace_context: str | None = None

    def admission(self, job: Job) -> Admission:
        """What ``job``, the job this request builds, is admitted on."""
        return Admission(
            job.caller,
            job.idem_key,
            job.targets_total,
            self.targets_per_job,
            self.jobs_per_caller,
            self.jobs_total,
        )


@dataclass(frozen=True, slots=True)
class Admission:
    """What a job is admitted on (:meth:`JobStore.create_job` reads it first): its caller
    (checked), its idempotency key (:func:`~trio_batch.idem_key`), its size, and the caps it
    must fit."""

    caller: str
    idem_key: str
    targets_total: int
    targets_per_job: int
    jobs_per_caller: int
    jobs_total: int


@dataclass(frozen=True, slots=True)
class ReapedJob:
    """A live job a reap failed: its id and its stored trace context (None: none stored)."""

    job_id: str
    trace_context: str | None = None


ReapObserver = Callable[[Sequence[ReapedJob]], None]
"""Called on the event loop with the jobs a reap in the background failed (PostgreSQL's
heartbeat reaps other runners' jobs), so a tracer can continue their traces."""


@dataclass(frozen=True, slots=True)
class StoreCounts:
    """What ``/metrics`` shows of the store: unexpired jobs by status, and their targets."""

    jobs: Mapping[str, int]
    targets_total: int
    targets_done: int
    targets_failed: int
    #: Targets without an outcome whose job is terminal (cancelled, failed): they never run.
    targets_abandoned: int

    @property
    def targets_succeeded(self) -> int:
        """Targets of unexpired jobs stored as ``done`` (``targets_done`` counts failed ones)."""
        return self.targets_done - self.targets_failed

    @property
    def targets_unfinished(self) -> int:
        """Targets of unexpired live jobs that have no stored outcome yet (they may still run)."""
        return self.targets_total - self.targets_done - self.targets_abandoned


@dataclass(frozen=True, slots=True)
class DrainChanges:
    """What other runners did to jobs this runner drains (see
    :meth:`ClusterStore.drain_changes`)."""

    #: Jobs marked ``cancelled`` (by any runner): start no further target, honour the grace.
    cancelled: frozenset[str] = frozenset()
    #: Jobs no longer this runner's (reaped while it was paused or cut off): stop at once; the
    #: store refuses their writes anyway.
    lost: frozenset[str] = frozenset()
