"""The runner's drains: one task per job, fetching its targets in order and storing each
outcome before the next starts, and the registry of the drains that run.

Every outcome is written through the :class:`~trio_batch.JobStore` with a call that cannot be
cancelled, so no cancellation can leave it half-written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

import trio

from .._config import Config
from .._errors import StoreUnavailable
from .._model import Job, JobState, OutcomeWrite, Result
from .._text import safe_text
from .._tracing import Tracing
from ..store import ClusterStore, JobStore, cluster_of
from ._attempts import Attempts, Failure
from ._cluster import release, wait_for_heartbeat
from ._deliveries import Deliveries
from ._drain import _Drain
from ._store_retry import retry_refused

__all__ = ["ADOPT_MAX", "IN_DOUBT_MAX", "Drains"]

#: Most undrained jobs one poll adopts (see :meth:`Drains.adopt_undrained`): a bounded read.
ADOPT_MAX = 16
#: Most creates in doubt remembered for :meth:`Drains.adopt_undrained` (the oldest go).
IN_DOUBT_MAX = 1024


def _log_refused(log: logging.Logger, drain: _Drain, idx: int) -> None:
    """The store refused a drain's outcome (nothing was written): its job lapsed, was
    forgotten, or was reaped by another runner while this one was cut off. Said, so that an
    operator sees why the drain stopped (a reap found by the poll first is logged there)."""
    if not drain.lost:
        log.warning(
            "outcome refused: the job lapsed or is no longer this runner's; drain stopped",
            extra={"job_id": drain.job_id, "idx": idx},
        )


class Drains(Mapping[str, _Drain]):
    """The runner's drain tasks, by job id: the drains registered (a job being created has
    one before its task starts) until each stops."""

    def __init__(
        self,
        *,
        store: JobStore,
        config: Config,
        now: Callable[[], float],
        log: logging.Logger,
        attempts: Attempts,
        deliveries: Deliveries,
        tracing: Tracing,
        nursery: trio.Nursery,
    ) -> None:
        self._store = store
        # The store as several runners share it; None with one runner per database.
        self._cluster = cluster_of(store)
        self._config = config
        self._now = now
        self._log = log
        self._attempts = attempts
        self._deliveries = deliveries
        self._tracing = tracing
        self._nursery = nursery
        self._by_id: dict[str, _Drain] = {}
        # While the poll reads the undrained jobs: the drains unregistered meanwhile.
        self._dropped_during_read: set[str] | None = None
        # Creates whose answer was lost (oldest first), until a poll has looked for their jobs.
        self._in_doubt: dict[str, None] = {}
        # Jobs the poll adopted (the newest IN_DOUBT_MAX): a wait that read one as drained
        # elsewhere reads it again, its adopted drain perhaps over already.
        self._adopted: dict[str, None] = {}
        #: Shutting down: drains stopped from now on were stopped by the shutdown.
        self.closed = False
        #: Jobs whose drains the shutdown stopped (the shutdown marks them failed).
        self.stopped_by_shutdown: set[str] = set()

    def __getitem__(self, job_id: str) -> _Drain:
        return self._by_id[job_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def register(self, drain: _Drain) -> None:
        """Register ``drain`` before its job exists, under the id the job will get: the moment
        another task can see the job (a reuse, a listing), a cancel or a wait finds it."""
        self._by_id[drain.job_id] = drain

    def start(self, drain: _Drain, job: Job) -> None:
        """Start the task of ``drain`` (registered already) on ``job``, as the store answered."""
        drain.job = job
        drain.started = True
        self._nursery.start_soon(self._drain, drain, name=f"trio_batch drain {job.id}")

    def unregister(self, drain: _Drain) -> None:
        """``drain`` is over (its task ended, or it never started): waiters and watchers wake."""
        del self._by_id[drain.job_id]
        if self._dropped_during_read is not None:
            self._dropped_during_read.add(drain.job_id)
        drain.stopped.set()
        drain.notify_stored()  # watchers re-read and see the job without a drain task

    async def adopt_undrained(self) -> None:
        """Start a drain for each live job of this runner's that has none (at most
        ``ADOPT_MAX``): its create committed but the submit raised, the answer lost
        (:meth:`ClusterStore.undrained_jobs`). Raises :class:`StoreUnavailable`.

        A job whose drain was registered at any moment of the read is left: its create was
        under way (or ended, then its drain ran). Cancellation: nothing started.
        """
        cluster = self._cluster
        assert cluster is not None  # the poll that calls this runs only for a cluster
        dropped: set[str] = set()
        self._dropped_during_read = dropped
        try:
            found = await cluster.undrained_jobs(
                list(self._by_id), now=self._now(), limit=ADOPT_MAX
            )
        finally:
            self._dropped_during_read = None
        for job, targets in found:
            if job.id in self._by_id or job.id in dropped or self.closed or job.is_terminal:
                continue
            self._log.warning(
                "job created but its answer lost; drain started", extra={"job_id": job.id}
            )
            drain = _Drain(job.id, job.caller, targets)
            if self._tracing.enabled:  # the span a submit's drain has (the submit's was dropped)
                drain.span = self._tracing.job_started(job.id, job.caller_class, job.targets_total)
            self.register(drain)
            _remember(self._adopted, job.id)
            self.start(drain, job)
        if len(found) < ADOPT_MAX:  # every live one was found: the others are not live
            await self._release_in_doubt(cluster, [i for i in self._in_doubt if i not in dropped])

    def in_doubt_add(self, job_id: str) -> None:
        """Remember ``job_id``, whose create raised StoreUnavailable: perhaps committed."""
        _remember(self._in_doubt, job_id)

    def was_adopted(self, job_id: str) -> bool:
        """Whether the poll adopted ``job_id`` (of the newest ``IN_DOUBT_MAX`` adopted)."""
        return job_id in self._adopted

    async def _release_in_doubt(self, cluster: ClusterStore, job_ids: list[str]) -> None:
        """Release the jobs of ``job_ids`` (creates in doubt, none of them live and undrained)
        that were cancelled before the poll could adopt them: no drain ever releases them, and
        waits on other runners would last until this one stops. Forgets them (the adopted
        too). Raises StoreUnavailable, those not released yet still remembered; cancellation
        leaves the same."""
        asked = [job_id for job_id in job_ids if job_id not in self._by_id]
        for job_id in job_ids:
            if job_id in self._by_id:  # adopted
                self._in_doubt.pop(job_id, None)
        if not asked:
            return
        changes = await cluster.drain_changes(asked)
        for job_id in asked:
            if job_id in changes.cancelled - changes.lost and job_id not in self._by_id:
                await cluster.release_job(job_id)
            self._in_doubt.pop(job_id, None)

    async def _drain(self, drain: _Drain) -> None:
        """Fetch the job's targets in order, storing each outcome before the next starts.

        Cancellation: the drain's scope cancels a fetch in flight (its outcome is then the
        cancellation's failure, stored like any other); a store call cannot be cancelled, so
        no outcome is left half-written. A cancelled drain starts no further target, even
        where the fetch function never checkpoints.
        """
        self._tracing.enter_job(drain.span)  # this task's context: its store calls are children
        try:
            with drain.scope:
                job: Job | None = drain.job
                ttl = self._config.ttl
                self._attempts.enter_job(drain)
                for idx, target in enumerate(drain.targets):
                    # A store call never raises Cancelled, and a fetch may never checkpoint:
                    # without this, a shutdown (or a reap) would not stop the drain at all.
                    await trio.lowlevel.checkpoint_if_cancelled()
                    await self._wait_until_target_may_start(drain)
                    if drain.cancel_requested:
                        break
                    drain.in_flight = idx
                    result, attempts = await self._attempts.run(drain, idx, target)
                    write = self._outcome_write(drain, idx, result, attempts)
                    try:
                        job = await self._store.record_outcome(write, ttl=ttl, now=self._now())
                    except StoreUnavailable as exc:
                        job = await self._store_retried(drain, write, exc)
                    self._outcome_stored(drain, write, job)
                    drain.in_flight = None
                    if job is None or job.is_terminal:
                        break  # refused, finished, or cancelled while the target ran
                if drain.cancel_requested and (job is None or not job.is_terminal):
                    # Normally cancel() has marked the job; if its write failed, do it here.
                    await drain.cancel_settled.wait()
                    if drain.cancel_failed:
                        await self._finish_when_possible(drain, JobState.CANCELLED, None)
                if job is None or job.targets_done < job.targets_total:
                    # Stopped early (cancelled here or elsewhere): tell waiters on other runners.
                    await release(self._cluster, drain, self._log)
        except Exception as exc:
            self._tracing.job_failed(drain.span, exc)
            # The database stayed unavailable past Config.store_retry_for (or a bug): fail the
            # job rather than the host's nursery, and keep the runner serving other calls.
            self._log.error(
                "job drain failed",
                exc_info=True,
                extra={"job_id": drain.job_id, "caller": drain.caller, "idx": drain.in_flight},
            )
            reason = f"{type(exc).__name__}: {exc}"
            if drain.in_flight is not None:
                reason = f"could not store the outcome of target {drain.in_flight}: {reason}"
            await self._finish_when_possible(drain, JobState.FAILED, safe_text(reason))
            await release(self._cluster, drain, self._log)
        finally:
            if self.closed:
                self.stopped_by_shutdown.add(drain.job_id)
            drain.in_flight = None
            self._tracing.job_ended(drain.span, drain.job, cancelled=drain.cancel_requested)
            self.unregister(drain)

    async def _wait_until_target_may_start(self, drain: _Drain) -> None:
        """Where other runners may be about to take this one for dead, wait for a heartbeat
        to get through (a reap stops the drain meanwhile)."""
        cluster = self._cluster
        if cluster is not None and not cluster.can_start_target():
            await wait_for_heartbeat(cluster, drain, self._config.poll_interval)

    def _outcome_stored(self, drain: _Drain, write: OutcomeWrite, job: Job | None) -> None:
        """The store answered ``write`` with ``job`` (None: refused for good, the job lapsed
        or is no longer this runner's): the drain holds it, watchers wake, and a job this
        write ended is logged and its deliveries woken."""
        drain.job = job
        drain.notify_stored()
        log = self._log
        if log.isEnabledFor(logging.DEBUG):
            status = "done" if write.error is None else "failed"
            extra = {"job_id": drain.job_id, "idx": write.idx, "status": status}
            log.debug("target stored", extra=extra)
        if job is None:
            _log_refused(log, drain, write.idx)
        elif job.is_terminal:
            self._deliveries.wake()
            if log.isEnabledFor(logging.INFO):
                extra = {"job_id": drain.job_id, "caller": drain.caller, "status": str(job.status)}
                log.info("job finished", extra=extra)

    async def _finish_when_possible(
        self, drain: _Drain, status: JobState, error: str | None
    ) -> None:
        """Set the job's terminal status, retrying with backoff until the database takes it.

        Cancellation (shutdown) stops the retries; the job is then reaped at shutdown or at the
        next start.
        """
        await retry_refused(
            lambda: self._store.finish_job(drain.job_id, status, error=error, now=self._now()),
            what="set the job's status",
            give_up_at=None,
            log=self._log,
            extra={"job_id": drain.job_id, "status": str(status)},
        )
        self._deliveries.wake()

    def _outcome_write(
        self, drain: _Drain, idx: int, result: Result | Failure, attempts: int
    ) -> OutcomeWrite:
        """The write that stores ``result`` as the outcome of target ``idx``."""
        limit = self._config.max_result_size
        if isinstance(result, Result):
            return OutcomeWrite(drain.job_id, idx, result, attempts=attempts, max_result_size=limit)
        return OutcomeWrite(
            drain.job_id, idx, None, result.error, result.hint, attempts, max_result_size=limit
        )

    async def _store_retried(
        self, drain: _Drain, write: OutcomeWrite, refused: StoreUnavailable
    ) -> Job | None:
        """Store an outcome the database refused (``refused``), retrying with backoff for up to
        ``Config.store_retry_for`` seconds; raises StoreUnavailable once time is up.

        Each attempt cannot be cancelled (see JobStore.record_outcome): in effect shielded, and
        bounded by the store's own timeouts; the waits between them can be (at shutdown).
        """
        return await retry_refused(
            lambda: self._store.record_outcome(write, ttl=self._config.ttl, now=self._now()),
            what="store an outcome",
            give_up_at=trio.current_time() + self._config.store_retry_for,
            log=self._log,
            extra={"job_id": drain.job_id, "idx": write.idx},
            refused=refused,
        )


def _remember(ids: dict[str, None], job_id: str) -> None:
    """Add ``job_id`` to ``ids``, the oldest dropped past ``IN_DOUBT_MAX``."""
    if len(ids) >= IN_DOUBT_MAX:
        del ids[next(iter(ids))]
    ids[job_id] = None
