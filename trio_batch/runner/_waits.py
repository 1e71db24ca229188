"""The runner's waits on jobs: for the end of a job, and for each of its outcomes as it is
stored. A job this runner drains is waited on by event; one another runner drains (where
runners share the database) is re-read when that runner notifies a change of it
(:class:`~._cluster.ChangedElsewhere`), and at least every poll interval."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable

import trio

from .._model import Job, JobState, TargetStatus
from ..store import JobStore, cluster_of
from ._batch_ops import EXPORT_PAGE_BYTES
from ._cluster import ChangedElsewhere, wait_at_most, wait_elsewhere, watch
from ._drains import Drains

__all__ = ["WATCH_PAGE", "WATCH_PAGE_BYTES", "Waits"]

#: Most outcomes a watcher reads at once.
WATCH_PAGE = 256
#: Most characters of results a watcher's page holds (past it the page ends early), as an
#: export's: with 10 MB results a page of 256 held 2.5 GB.
WATCH_PAGE_BYTES = EXPORT_PAGE_BYTES


class Waits:
    """Waits on jobs, for :meth:`Runner.wait <trio_batch.Runner.wait>` and
    :meth:`Runner.watch <trio_batch.Runner.watch>` (which check the id first)."""

    def __init__(
        self,
        store: JobStore,
        drains: Drains,
        elsewhere: ChangedElsewhere,
        *,
        now: Callable[[], float],
        poll_interval: float,
    ) -> None:
        self._store = store
        self._cluster = cluster_of(store)
        self._drains = drains
        self._elsewhere = elsewhere
        self._now = now
        self._poll_interval = poll_interval
        #: Set once shutdown has tried to mark the live jobs failed ("shutdown").
        self.shutdown_marked = trio.Event()
        #: ...and whether it did.
        self.shutdown_marked_ok = False

    async def wait(self, job_id: str) -> Job | None:
        """See :meth:`Runner.wait <trio_batch.Runner.wait>`."""
        drain = self._drains.get(job_id)
        if drain is not None:
            await drain.stopped.wait()
            held = drain.job
            # The job as the drain's last write answered: nothing writes a terminal job but
            # a forget or a purge. Not terminal (a cancel's or a failure's mark came after
            # the last outcome), it is stale: read it back.
            if held is not None and held.is_terminal:
                return held if held.expires_at > self._now() else None
            if not drain.started and not self._drains.closed:
                # Its create raised, perhaps committed (the answer lost): the job, if it
                # exists, is adopted by the poll under a drain of its own. Wait for that.
                return await self.wait(job_id)
        elif job_id not in self._drains.stopped_by_shutdown and self._cluster is not None:
            found = await wait_elsewhere(
                self._store,
                self._cluster,
                job_id,
                self._elsewhere,
                now=self._now,
                interval=self._poll_interval,
                closing=lambda: self._drains.closed,
            )
            # Adopted meanwhile (its create's answer lost): the store answers a job of this
            # runner's drain over, yet the adopted drain may still store an outcome, or have
            # stored it since the job was read and stopped.
            if job_id in self._drains:
                return await self.wait(job_id)
            if self._drains.was_adopted(job_id):
                return await self._store.get_job(job_id, now=self._now())
            return found
        job = await self._store.get_job(job_id, now=self._now())
        if job is not None and not job.is_terminal and self._drains.closed:
            # Its drain was stopped by the shutdown, which marks it failed next: report that.
            await self.shutdown_marked.wait()
            if self.shutdown_marked_ok:
                job = dataclasses.replace(job, status=JobState.FAILED, error="shutdown")
        return job

    async def watch(
        self, job_id: str, results_up_to: int | None = None
    ) -> AsyncIterator[TargetStatus | Job]:
        """See :meth:`Runner.watch <trio_batch.Runner.watch>`."""
        seen = 0  # targets are drained in idx order: the outcomes below this were yielded
        watched = False  # another runner drains it and was asked to notify its end
        checked = False  # its drain was read over once: an outcome stored before, read again
        reread = False  # read again once its adopted drain had stopped
        while True:
            # A store read never raises Cancelled: a watcher that awaits nothing else would
            # otherwise read on to the end of a finished job, cancelled or not.
            await trio.lowlevel.checkpoint_if_cancelled()
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
                    job_id,
                    seen,
                    now=self._now(),
                    limit=WATCH_PAGE,
                    max_bytes=WATCH_PAGE_BYTES,
                    results_up_to=results_up_to,
                )
                if found is None:
                    return
                job, targets = found
                for target in targets:
                    yield target
                    seen = target.idx + 1
                # Outcomes are stored in idx order, and the job, read in the same snapshot,
                # counts them: fewer seen means the page ended early, cut by count or by
                # size (its length alone cannot tell the latter). An empty read never reads
                # on at once, whatever the counts say.
                if targets and seen < job.targets_done:
                    continue  # more were stored than one page holds: read on at once
                cluster = self._cluster
                if drain is None:
                    if job.is_terminal and (cluster is None or await cluster.drain_over(job_id)):
                        if job_id in self._drains:
                            continue  # adopted meanwhile (see wait): its outcomes come still
                        if job.targets_done < job.targets_total and not checked:
                            checked = True  # stored since the read, before the drain stopped
                            continue
                        if self._drains.was_adopted(job_id) and not reread:
                            reread = True  # its adopted drain stopped since: all is stored
                            continue
                        yield job
                        return
                    if self._drains.closed or cluster is None:
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
                    await wait_at_most(changed, min(self._poll_interval, lapse))
                    continue
                await changed.wait()
