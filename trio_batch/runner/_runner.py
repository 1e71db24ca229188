"""The runner: one drain task per job, each fetching its job's targets one at a time.

A long-lived nursery owns the drain tasks; each runs under its own ``CancelScope``. Every
outcome is written through the :class:`~trio_batch.JobStore` with a call that cannot be
cancelled, so no cancellation can leave it half-written. The runner knows nothing of SQL, HTTP
or how a target is fetched: those are the store backend and the injected fetch function.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from types import EllipsisType

import trio

from .._config import Config
from .._errors import (
    Busy,
    CallerBusy,
    JobLive,
    RunnerClosed,
    StoreUnavailable,
)
from .._event import Delivery
from .._model import (
    Job,
    JobState,
    Target,
    TargetStatus,
    check_caller,
    is_job_id,
    with_running,
)
from .._retry import RetryNotice
from .._tracing import NO_TRACING, Tracing
from ..store import JobFilter, JobStore, cluster_of
from ._attempts import Attempts, FetchFunc
from ._batch_ops import (
    check_only,
    export_targets,
    matching_live_jobs,
    retry_targets,
)
from ._check import target_checker
from ._cluster import ChangedElsewhere
from ._deliveries import Deliveries, WebhookDeliverer
from ._drains import Drains
from ._purge import purge_lapsed
from ._submit import SubmitChecks, check_reused_webhook, job_webhook
from ._waits import Waits

__all__ = ["FetchFunc", "Runner"]


class Runner:
    """Runs jobs: submit, cancel, status, wait. Get one from :func:`open_runner`.

    Every method may be called from any task of the trio run that opened the runner. It is
    made of parts, each with its own state: its drains (:class:`~._drains.Drains`), its
    submits' checks (:class:`~._submit.SubmitChecks`), the webhook deliveries
    (:class:`~._deliveries.Deliveries`), and, where runners share the database, its watch
    on the others (:class:`~._cluster.ChangedElsewhere`).
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
        self._config = config
        self._now = now
        self._log = logger
        self._deliveries = Deliveries(
            store,
            now=now,
            webhooks=webhooks,
            on_terminal=config.on_terminal,
            poll_interval=config.poll_interval,
            logger=logger,
            tracing=tracing,
        )
        self._submits = SubmitChecks(config, tracing, webhooks, target_checker(fetch))
        self._sends_webhooks = webhooks is not None
        self._drains = Drains(
            store=store,
            config=config,
            now=now,
            log=logger,
            attempts=Attempts(fetch, config, logger, on_retry, tracing),
            deliveries=self._deliveries,
            tracing=tracing,
            nursery=nursery,
        )
        # Fed by the store's listener: wakes the poll, and waits on other runners' jobs.
        self._elsewhere = ChangedElsewhere(self._drains)
        self._waits = Waits(
            store, self._drains, self._elsewhere, now=now, poll_interval=config.poll_interval
        )
        self._stopped = False  # shut down: no more calls

    @property
    def _closed(self) -> bool:
        """Shutting down: no new jobs."""
        return self._drains.closed

    @_closed.setter
    def _closed(self, closed: bool) -> None:
        self._drains.closed = closed

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
        runner without one raises :class:`InvalidRequest`. A job that would be reused but has
        another webhook, or none, raises :class:`WebhookConflict` (nothing is created, the
        webhook asked for is never dropped without a sign); without ``webhook`` a reused job
        keeps its own.

        Raises :class:`InvalidTargets` (an empty list, a non-target, a repeated target, or one
        the fetch function's ``check_target`` hook refused, see ``_check``: nothing stored),
        :class:`InvalidRequest` (a bad caller name, metadata or parent id),
        :class:`TooManyTargets`, :class:`CallerBusy`, :class:`Busy`, :class:`WebhookConflict`,
        :class:`StoreUnavailable` if the database refuses the write (or its answer was lost:
        the job may exist, and the runner's poll then drains it, see
        :meth:`ClusterStore.undrained_jobs`), or :class:`RunnerClosed` after shutdown.

        Cancellation: once the job is being created, the creation and the start of its drain
        task complete even if this call is cancelled (``Cancelled`` is then raised at the
        caller's next checkpoint), so a created job is never left without its drain task.
        A cancel that came before the call raises ``Cancelled`` at once, nothing created.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        want, caller_class, checked, labels, webhook = self._submits.check(
            caller, caller_class, targets, metadata, parent_id, webhook
        )
        drain, request = self._submits.request(
            want, caller_class, checked, labels, parent_id, webhook
        )
        self._drains.register(drain)
        started = False
        try:
            # No shield needed: a store call that has begun completes, and its Cancelled comes
            # at the caller's next checkpoint (JobStore), after the drain below has started.
            job, reused = await self._store.create_job(request, now=self._now())
            if reused:
                self._on_reuse(job)
                if webhook is not None:
                    await check_reused_webhook(self._store, job, webhook, now=self._now())
                return job.id, True
            if self._closed:
                # Shutdown began while the job was being created; shutdown marks it failed.
                raise RunnerClosed("the runner is shutting down; the job was not started")
            self._drains.start(drain, job)
            started = True
        except (Busy, CallerBusy) as refused:
            # An answer, not a fault: raised afresh, it keeps none of the store's frames (nor
            # their locals) alive while the caller backs off, for the collector to walk.
            raise refused.with_traceback(None) from None
        except StoreUnavailable:
            if self._cluster is not None:
                # Committed perhaps (the answer lost with the connection): the poll, woken
                # now, adopts the job if it exists (after the drain below is unregistered).
                self._drains.in_doubt_add(drain.job_id)
                self._elsewhere.wake_poll()
            raise
        finally:
            if not started:
                self._drains.unregister(drain)
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
        return await self._waits.wait(job_id)

    async def watch(
        self, job_id: str, *, results_up_to: int | None = None
    ) -> AsyncIterator[TargetStatus | Job]:
        """Yield each stored outcome of the job in ``idx`` order, then the terminal job.

        Outcomes stored before the call come first, then each new one as soon as it is stored;
        the last item is the :class:`Job` once it is terminal and its drain task has stopped
        (as :meth:`wait` returns it). Yields nothing for an unknown or lapsed id; stops early if
        the job lapses. Waits on events for a job this runner drains; one that another runner
        drains is re-read when that runner notifies a change of it (its end, not each outcome)
        and at least every ``Config.poll_interval`` (during this runner's shutdown, the
        iterator stops with what is stored). Targets left ``pending`` (after a
        cancel, a restart or a shutdown) are not yielded.

        ``results_up_to``: a result of more characters than that (its JSON) is not read from
        the store; its target comes with ``result`` None and the length in ``result_size``,
        for a watcher that shows big results as a link to :meth:`target`.

        Cancellation: safe at any point; the iterator simply stops.
        """
        self._check_running()
        if not is_job_id(job_id):
            return
        async for item in self._waits.watch(job_id, results_up_to):
            yield item

    # ----------------------------------------------------------------------------------------
    # Reads of one job

    async def status(self, job_id: str) -> tuple[Job, list[TargetStatus]] | None:
        """The job and its targets as stored, or None for an unknown or lapsed id.

        The target being fetched reads as ``running``.

        Cancellation: a cancel raises ``Cancelled`` before the read, not after it (a read
        started completes), so a loop of reads can be cancelled.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_running()
        if not is_job_id(job_id):
            return None
        in_flight = self._in_flight(job_id)  # before the snapshot: pending or done in it
        status = await self._store.get_status(job_id, now=self._now())
        if status is None or in_flight is None:
            return status
        # The store derives "running" for running jobs; a cancelled job's last fetch is known
        # only here.
        job, targets = status
        return job, with_running(job, targets, in_flight)

    async def overview(self, job_id: str) -> tuple[Job, list[TargetStatus], list[int]] | None:
        """Like :meth:`status` without the results: each target's ``result`` is None, and the
        third item gives each result's size in characters. Costs the same however big the
        results are; read one with :meth:`target`. Cancellation: as :meth:`status`."""
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_running()
        if not is_job_id(job_id):
            return None
        in_flight = self._in_flight(job_id)
        found = await self._store.get_overview(job_id, now=self._now())
        if found is None or in_flight is None:
            return found
        job, targets, sizes = found
        return job, with_running(job, targets, in_flight), sizes

    async def target(self, job_id: str, idx: int) -> tuple[Job, TargetStatus] | None:
        """The job and one of its targets with its result; None for an unknown job or index.

        Cancellation: as :meth:`status`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_running()
        if not is_job_id(job_id):  # the stores answer None for an index that cannot exist
            return None
        in_flight = self._in_flight(job_id)
        found = await self._store.get_target(job_id, idx, now=self._now())
        if found is None or in_flight is None:
            return found
        job, target = found
        return job, with_running(job, [target], in_flight)[0]

    async def delivery(self, job_id: str) -> Delivery | None:
        """Where the job's terminal event stands (attempts, last answer, delivered at); None
        for a job without a webhook or ``Config.on_terminal``, or an unknown or lapsed one."""
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_running()
        if not is_job_id(job_id):
            return None
        return await self._store.get_delivery(job_id, now=self._now())

    async def redeliver(self, job_id: str) -> Delivery | None:
        """Send the terminal job's event again now, with the same event id: a new round of
        attempts, with backoff, for up to a day. None if the job has no written event (it
        is live, has no webhook, or is unknown). The caller checks whose job it is."""
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_running()
        if not is_job_id(job_id):
            return None
        found = await self._store.redeliver(job_id, now=self._now())
        if found is not None:
            self._deliveries.wake()
        return found

    def _in_flight(self, job_id: str) -> int | None:
        """The target this runner is fetching for ``job_id`` (a cancelled job's last fetch
        is known only here), or None."""
        drain = self._drains.get(job_id)
        return None if drain is None else drain.in_flight

    # ----------------------------------------------------------------------------------------
    # Many targets or jobs at once

    async def retry(
        self,
        job_id: str,
        *,
        only: Collection[str] = ("failed",),
        caller: str | None = None,
        webhook: str | EllipsisType | None = ...,
    ) -> tuple[str, bool] | None:
        """Submit a new job of the ended job ``job_id``'s targets that ``only`` names:
        ``"failed"`` ones, and ``"pending"`` ones (never fetched: the job was cancelled, or
        failed by a restart). Returns ``(new job id, reused)`` as :meth:`submit` does, or
        None if the job is unknown, lapsed or (with ``caller``) another caller's.

        The new job has the same caller, caller class, metadata, options and custom ids, and
        ``parent_id`` set to ``job_id``; ``webhook`` is its webhook URL (None: none), by
        default the ended job's own (when this runner sends webhooks); the usual caps and
        idempotency apply (retrying the same job the same way again, while the retry's lease
        holds, is that same retry). Raises
        :class:`InvalidRequest` for a bad ``only``, :class:`JobLive` for a live job,
        :class:`InvalidTargets` if no target is picked, and what :meth:`submit` raises.
        Cancellation: as :meth:`submit`; reading the targets can be cancelled at any point.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        kinds = check_only(only)
        if not is_job_id(job_id):
            return None
        job = await self._store.get_job(job_id, now=self._now())
        if job is None or (caller is not None and job.caller != caller):
            return None
        limit, _ = self._config.limits_for(job.caller_class)
        targets = await retry_targets(self._store, job, kinds, now=self._now(), limit=limit)
        if webhook is ...:  # the ended job's, where this runner sends its jobs' events
            webhook = None
            if self._sends_webhooks:
                webhook = await job_webhook(self._store, job.id, now=self._now())
        try:
            return await self.submit(
                job.caller,
                job.caller_class,
                targets,
                metadata=job.metadata,
                parent_id=job.id,
                webhook=webhook,
            )
        except (Busy, CallerBusy) as refused:
            # As submit's own refusals: nothing of the job or its targets held while the caller
            # backs off.
            del job, targets
            raise refused.with_traceback(None) from None

    async def export(
        self, job: Job, *, after: int = -1, merged: bool = False
    ) -> AsyncIterator[tuple[str, TargetStatus]]:
        """``(job id, target)`` for each target of ``job`` after index ``after``, in order,
        read a page at a time. ``merged``: each target that one of ``job``'s retries (up to 16,
        however deep) has an outcome for shows the newest such outcome and its retry's id.
        Cancellation: stops at once, nothing held. An ``after`` that is not an int raises
        TypeError (as the store's paging arguments do, see ``check_paging``)."""
        async for pair in export_targets(
            self._store, job, now=self._now(), after=after, merged=merged
        ):
            yield pair

    async def cancel_matching(
        self, caller: str, where: JobFilter, *, dry_run: bool = False
    ) -> list[str]:
        """Cancel ``caller``'s live jobs that ``where`` lists (see :meth:`cancel`); returns
        their ids, newest first. ``dry_run``: only return them. Another caller's jobs are never
        read. Cancellation: the jobs cancelled so far stay cancelled."""
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_running()
        caller = check_caller(caller)
        jobs = await matching_live_jobs(self._store, caller, where, now=self._now())
        if dry_run:
            return [job.id for job in jobs]
        return [job.id for job in jobs if await self.cancel(job.id)]

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
