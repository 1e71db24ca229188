"""The runner: one drain task per job, each fetching its job's targets one at a time.

A long-lived nursery owns the drain tasks; each runs under its own ``CancelScope``. Every
outcome is written through the :class:`~trio_batch.JobStore` with a call that cannot be
cancelled, so no cancellation can leave it half-written. The runner knows nothing of SQL, HTTP
or how a target is fetched: those are the store backend and the injected fetch function.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

import trio

from .._config import Config
from .._errors import Busy, CallerBusy, JobLive, RunnerClosed, StoreUnavailable
from .._model import (
    Job,
    JobState,
    Target,
    TargetStatus,
    is_job_id,
)
from .._outage_log import OutageLog
from .._retry import RetryNotice
from .._tracing import NO_TRACING, Tracing
from ..store import JobStore, cluster_of
from ._attempts import Attempts, FetchFunc
from ._batch_ops import BatchOps
from ._check import target_checker
from ._cluster import ChangedElsewhere, wait_at_most, wait_elsewhere, watch
from ._deliveries import Deliveries, WebhookDeliverer
from ._drain import _Drain
from ._drain_loop import DrainLoop
from ._purge import purge_lapsed
from ._reads import JobReads
from ._submit import SubmitRequests

__all__ = ["FetchFunc", "Runner"]

#: Most outcomes a watcher reads at once (a page of results held in memory).
WATCH_PAGE = 256


class Runner(BatchOps, JobReads, DrainLoop, SubmitRequests):
    """Runs jobs: submit, cancel, status, wait. Get one from :func:`open_runner`.

    Every method may be called from any task of the trio run that opened the runner.
    """

    def __init__(
        self,
        *,
        store: JobStore,
        fetch: FetchFunc,
        config: Config,
        now: Callable[[], float],
        logger: logging.Logger,
        nursery: trio.Nursery,
        on_retry: Callable[[RetryNotice], None] | None = None,
        tracing: Tracing = NO_TRACING,
        webhooks: WebhookDeliverer | None = None,
    ) -> None:
        self._store = store
        self._cluster = cluster_of(store)
        self._tracing = tracing
        self._webhooks = webhooks
        self._deliveries = Deliveries(
            store,
            now=now,
            webhooks=webhooks,
            on_terminal=config.on_terminal,
            poll_interval=config.poll_interval,
            logger=logger,
            tracing=tracing,
        )
        self._config = config
        self._now = now
        self._log = logger
        self._nursery = nursery
        self._attempts = Attempts(fetch, config, logger, on_retry, tracing)
        self._check_target = target_checker(fetch)
        self._drains: dict[str, _Drain] = {}
        # While the poll reads the undrained jobs: the drains unregistered meanwhile.
        self._dropped_during_read: set[str] | None = None
        self._in_doubt: dict[str, None] = {}
        # Fed by the store's listener: wakes the poll, and waits on other runners' jobs.
        self._elsewhere = ChangedElsewhere(self._drains)
        self._closed = False  # shutting down: no new jobs
        # Jobs whose drains the shutdown stopped: wait() reports them as the shutdown marks them.
        self._stopped_by_shutdown: set[str] = set()
        self._stopped = False  # shut down: no more calls
        # Set once shutdown has tried to mark the live jobs failed ("shutdown"); ok if it did.
        self._shutdown_marked = trio.Event()
        self._shutdown_marked_ok = False

    @property
    def config(self) -> Config:
        """The runner's limits."""
        return self._config

    @property
    def store(self) -> JobStore:
        """The store the runner writes to."""
        return self._store

    # ----------------------------------------------------------------------------------------
    # Public API

    async def submit(
        self,
        caller: str,
        caller_class: str,
        targets: Sequence[Target],
        *,
        metadata: Mapping[str, str] | None = None,
        parent_id: str | None = None,
        webhook: str | None = None,
    ) -> tuple[str, bool]:
        """Submit a job of ``targets`` for ``caller``; returns ``(job_id, reused)``.

        ``metadata``: the job's labels (at most 16 string keys to strings, see
        :func:`~trio_batch.check_metadata`), returned with the job and filtered on by
        :meth:`JobStore.list_caller_jobs`. ``parent_id``: the job this one retries (what
        :meth:`retry` sets). If ``caller`` already submitted the same targets (same URLs,
        options, custom ids and order) with the same metadata and parent, and that
        job's lease has not lapsed, its id comes back with ``reused=True``: nothing is fetched
        or written again, whatever that job's status. Otherwise the caps are checked and the job
        is created in one transaction, already ``running``, and its drain task is started.

        The caps are the :class:`Config`'s, with ``targets_per_job`` and ``jobs_per_caller``
        overridden for ``caller_class`` by ``Config.class_limits``.

        ``webhook``: a URL the job's terminal event is sent to (signed, at least once; see
        :mod:`trio_batch.runner._deliveries`), checked by the runner's webhook sender; a
        runner without one raises :class:`InvalidRequest`. A reused job keeps its own.

        Raises :class:`InvalidTargets` (an empty list, a non-target, a repeated target, or one
        the fetch function's ``check_target`` hook refused, see ``_check``: nothing stored),
        :class:`InvalidRequest` (a bad caller name, metadata or parent id),
        :class:`TooManyTargets`, :class:`CallerBusy`, :class:`Busy`, :class:`StoreUnavailable`
        if the database refuses the write (or its answer was lost: the job may exist, and the
        runner's poll then drains it, see :meth:`ClusterStore.undrained_jobs`), or
        :class:`RunnerClosed` after shutdown.

        Cancellation: once the job is being created, the creation and the start of its drain
        task complete even if this call is cancelled (``Cancelled`` is then raised at the
        caller's next checkpoint), so a created job is never left without its drain task.
        A cancel that came before the call raises ``Cancelled`` at once, nothing created.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        want, caller_class, checked, labels, webhook = self._checked_submit(
            caller, caller_class, targets, metadata, parent_id, webhook
        )
        drain, request = self._new_job_request(
            want, caller_class, checked, labels, parent_id, webhook
        )
        # The drain is registered before the job exists, under the id the job will get: the
        # moment another task can see the job (a reuse, a listing), cancel() and wait() find
        # its drain.
        self._drains[drain.job_id] = drain
        started = False
        try:
            # No shield needed: a store call that has begun completes, and its Cancelled comes
            # at the caller's next checkpoint (JobStore), after the drain below has started.
            job, reused = await self._store.create_job(request, now=self._now())
            if reused:
                self._on_reuse(job)
                return job.id, True
            if self._closed:
                # Shutdown began while the job was being created; shutdown marks it failed.
                raise RunnerClosed("the runner is shutting down; the job was not started")
            self._start_drain(drain, job)
            started = True
        except (Busy, CallerBusy) as refused:
            # An answer, not a fault: raised afresh, it keeps none of the store's frames (nor
            # their locals) alive while the caller backs off, for the collector to walk.
            raise refused.with_traceback(None) from None
        except StoreUnavailable:
            if self._cluster is not None:
                # Committed perhaps (the answer lost with the connection): the poll, woken
                # now, adopts the job if it exists (after the drain below is unregistered).
                self._in_doubt_add(drain.job_id)
                self._elsewhere.wake_poll()
            raise
        finally:
            if not started:
                self._unregister(drain)
                del drain, request  # nor this frame's job that was not created
        if self._log.isEnabledFor(logging.INFO):
            self._log.info("job submitted", extra=_submit_extra(job))
        return job.id, False

    def _on_reuse(self, job: Job) -> None:
        if self._log.isEnabledFor(logging.INFO):  # no log context built for nothing
            self._log.info("job reused", extra={**_submit_extra(job), "status": str(job.status)})

    async def cancel(self, job_id: str) -> bool:
        """Cancel a live job; returns False for an unknown, lapsed or already terminal job.

        The job is marked ``cancelled`` at once. The target being fetched finishes and its
        outcome is stored; the drain task then stops, and later targets stay ``pending``. With
        ``Config.cancel_grace`` set, a fetch still running that long after the cancel is
        cancelled and its target stored as failed with error ``"cancelled"``. Use :meth:`wait`
        to know when the drain task has stopped.

        If the database refuses the write, :class:`StoreUnavailable` is raised; the drain task
        still stops before its next target and marks the job cancelled once the database
        accepts it.

        Cancellation: a cancel that came before the call raises ``Cancelled`` at once, nothing
        done; once the job is being marked, the write completes (``Cancelled`` is then raised
        at the caller's next checkpoint).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_running()
        if not is_job_id(job_id):
            return False
        drain = self._drains.get(job_id)
        if drain is not None:
            drain.request_cancel(self._config.cancel_grace)
            drain.cancel_writes += 1
        try:
            job = await self._store.finish_job(job_id, JobState.CANCELLED, now=self._now())
        except BaseException:
            if drain is not None:
                drain.cancel_failed = True  # the drain marks the job cancelled once it can
            raise
        finally:
            if drain is not None:
                drain.cancel_writes -= 1
                if drain.cancel_writes == 0:
                    drain.cancel_settled.set()
        if job is not None:
            self._deliveries.wake()
            self._log.info("job cancelled", extra={"job_id": job_id, "caller": job.caller})
        return job is not None

    async def forget(self, job_id: str, *, caller: str | None = None) -> Job | None:
        """Delete a terminal job and its results, so the same targets can be submitted afresh.

        Returns the job as it was, or None if it is unknown, lapsed or (with ``caller``)
        another caller's (checked first: another caller's live job is None too). A live job, or
        a cancelled one whose in-flight target is still being stored, raises :class:`JobLive`:
        cancel it and :meth:`wait` for it first. On
        cancellation the delete has either happened whole or not at all.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        if not is_job_id(job_id):
            return None
        drain = self._drains.get(job_id)
        if drain is not None:
            if caller is not None and drain.caller != caller:
                return None  # the caller first: another caller's live job reads as unknown
            raise JobLive(
                f"job {job_id} is still running or storing its last target; wait for it to end"
            )
        return await self._store.forget_job(job_id, caller=caller, now=self._now())

    async def wait(self, job_id: str) -> Job | None:
        """Wait until the job is terminal and its drain task has stopped; return the job.

        After it returns no further write for the job can follow (after a cancel, that is once
        the in-flight outcome is stored). Returns None for an unknown or lapsed id. This waits
        on an event, never by polling, for a job this runner drains. A job that another runner
        sharing the database drains is re-read whenever that runner notifies a change of it,
        and at least every ``Config.poll_interval``, until it is terminal and that drain has
        stopped (during this runner's shutdown: as stored). A job stopped by the runner's
        shutdown comes back ``failed`` with error ``"shutdown"`` once shutdown has marked it so
        (as stored, if the database refused that). A wait begun while the job was being
        created, whose create then raised, goes on until the job ends (if the create committed,
        the poll adopts the job) or answers None (it did not). After the runner has stopped,
        raises :class:`RunnerClosed`.
        """
        self._check_running()
        if not is_job_id(job_id):
            return None
        drain = self._drains.get(job_id)
        if drain is not None:
            await drain.stopped.wait()
            held = drain.job
            # The job as the drain's last write answered: nothing writes a terminal job but
            # a forget or a purge. Not terminal (a cancel's or a failure's mark came after
            # the last outcome), it is stale: read it back.
            if held is not None and held.is_terminal:
                return held if held.expires_at > self._now() else None
            if not drain.started and not self._closed:
                # Its create raised, perhaps committed (the answer lost): the job, if it
                # exists, is adopted by the poll under a drain of its own. Wait for that.
                return await self.wait(job_id)
        elif job_id not in self._stopped_by_shutdown and self._cluster is not None:
            found = await wait_elsewhere(
                self._store,
                self._cluster,
                job_id,
                self._elsewhere,
                now=self._now,
                interval=self._config.poll_interval,
                closing=lambda: self._closed,
            )
            # Adopted meanwhile (its create's answer lost): the store answers a job of this
            # runner's drain over, yet the adopted drain may still store an outcome.
            return await self.wait(job_id) if job_id in self._drains else found
        job = await self._store.get_job(job_id, now=self._now())
        if job is not None and not job.is_terminal and self._closed:
            # Its drain was stopped by the shutdown, which marks it failed next: report that.
            await self._shutdown_marked.wait()
            if self._shutdown_marked_ok:
                job = dataclasses.replace(job, status=JobState.FAILED, error="shutdown")
        return job

    async def watch(self, job_id: str) -> AsyncIterator[TargetStatus | Job]:
        """Yield each stored outcome of the job in ``idx`` order, then the terminal job.

        Outcomes stored before the call come first, then each new one as soon as it is stored;
        the last item is the :class:`Job` once it is terminal and its drain task has stopped
        (as :meth:`wait` returns it). Yields nothing for an unknown or lapsed id; stops early if
        the job lapses. Waits on events for a job this runner drains; one that another runner
        drains is re-read when that runner notifies a change of it (its end, not each outcome)
        and at least every ``Config.poll_interval`` (during this runner's shutdown, the
        iterator stops with what is stored). Targets left ``pending`` (after a
        cancel, a restart or a shutdown) are not yielded.

        Cancellation: safe at any point; the iterator simply stops.
        """
        self._check_running()
        if not is_job_id(job_id):
            return
        seen = 0  # targets are drained in idx order: the outcomes below this were yielded
        watched = False  # another runner drains it and was asked to notify its end
        checked = False  # its drain was read over once: an outcome stored before, read again
        while True:
            drain = self._drains.get(job_id)
            # Taken before the read, so that nothing stored after it is missed.
            with (
                self._elsewhere.job(job_id)
                if drain is None
                else contextlib.nullcontext(drain.next_stored())
            ) as changed:
                # Only the outcomes not seen yet: re-reading the whole job at every outcome
                # made following a job of n targets cost n^2 rows.
                found = await self._store.get_outcomes(
                    job_id, seen, now=self._now(), limit=WATCH_PAGE
                )
                if found is None:
                    return
                job, targets = found
                for target in targets:
                    yield target
                    seen = target.idx + 1
                if len(targets) == WATCH_PAGE:
                    continue  # more were stored than one page holds: read on at once
                cluster = self._cluster
                if drain is None:
                    if job.is_terminal and (cluster is None or await cluster.drain_over(job_id)):
                        if job_id in self._drains:
                            continue  # adopted meanwhile (see wait): its outcomes come still
                        if job.targets_done < job.targets_total and not checked:
                            checked = True  # stored since the read, before the drain stopped
                            continue
                        yield job
                        return
                    if self._closed or cluster is None:
                        # Shutting down, or no runner drains it: nothing more is stored.
                        if job.is_terminal:
                            yield job
                        return
                    # Drained by another runner: woken by its notification, or polled.
                    if not watched and not await watch(cluster, job):
                        continue  # it ended before the store heard of the wait: read again
                    watched = True
                    # Its lapse is told by no one: read it again then.
                    lapse = job.expires_at - self._now()
                    await wait_at_most(changed, min(self._config.poll_interval, lapse))
                    continue
                await changed.wait()

    async def purge_expired(self) -> int:
        """Delete every job whose lease has lapsed, with its targets; returns how many.

        In small batches that yield to the jobs this runner drains (see
        :func:`~trio_batch.runner._purge.purge_lapsed`). The runner also does this every
        ``Config.purge_interval`` seconds.

        Cancellation: a batch in progress completes (store calls do); the pause between batches
        can be cancelled, and what was deleted so far stays deleted.
        """
        self._check_running()
        return await purge_lapsed(self._store, self._now, draining=lambda: bool(self._drains))

    async def _purge_periodically(self) -> None:
        outage = OutageLog(self._log, "purge lapsed jobs")
        while True:
            try:
                purged = await self.purge_expired()
            except StoreUnavailable as exc:
                outage.refused(exc)
            else:
                outage.answered()
                if purged:
                    self._log.info("lapsed jobs purged", extra={"jobs": purged})
            await trio.sleep(self._config.purge_interval)

    # ----------------------------------------------------------------------------------------
    # Checks

    def _check_open(self) -> None:
        """New jobs are refused from the moment shutdown begins."""
        self._check_running()
        if self._closed:
            raise RunnerClosed("the runner has shut down")

    def _check_running(self) -> None:
        """Every call is refused once the runner has stopped (its store may be closed)."""
        if self._stopped:
            raise RunnerClosed("the runner has stopped; its store answers no more calls")


def _submit_extra(job: Job) -> dict[str, object]:
    """The log context of a submit's answer."""
    return {"job_id": job.id, "caller": job.caller, "targets": job.targets_total}
