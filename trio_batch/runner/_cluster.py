"""Runners that share one database (PostgreSQL): what a runner learns of the others' doings.

A runner learns that another runner cancelled one of its jobs, or reaped it while it was
paused, by asking the store (:func:`poll_drain_changes`), and applies such changes exactly as a
local cancel would; the same poll adopts the live jobs of its own that it does not drain (a
create whose answer was lost). Waiting on a job another runner drains is re-reading it
(:func:`wait_elsewhere`). Both read again as soon as the store's listener reports the job changed
(:class:`ChangedElsewhere`, fed by :meth:`ClusterStore.listen_changes`: PostgreSQL's
LISTEN/NOTIFY), and otherwise every ``Config.poll_interval`` seconds, since a notification can
be lost. With one runner per database (SQLite: no :class:`ClusterStore`) none of this runs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping

import trio

from .._config import Config
from .._errors import StoreUnavailable
from .._model import Job
from .._outage_log import OutageLog
from ..store import ClusterStore, DrainChanges, JobStore
from ._drain import _Drain

__all__ = [
    "ChangedElsewhere",
    "poll_drain_changes",
    "release",
    "wait_elsewhere",
    "wait_for_heartbeat",
    "watch",
]


class ChangedElsewhere:
    """Wakes the poll and the waits on jobs as soon as the store reports them changed.

    :meth:`changed` is the :data:`~trio_batch.store.ChangeObserver` given to
    :meth:`ClusterStore.listen_changes`. Without reports (SQLite, PostgreSQL with LISTEN off, or
    while its listener reconnects) nothing is woken early and every wait lasts its interval.
    """

    def __init__(self, drains: Mapping[str, _Drain]) -> None:
        self._drains = drains
        self._poll = trio.Event()
        self._jobs: dict[str, list[trio.Event]] = {}

    def changed(self, job_ids: frozenset[str] | None) -> None:
        """Wake the waits on ``job_ids``, and the poll if this runner drains one of them;
        None (reports may have been missed): wake every wait and the poll."""
        if job_ids is None:
            woken = list(self._jobs)
        else:
            woken = [job_id for job_id in job_ids if job_id in self._jobs]
        for job_id in woken:
            for event in self._jobs.pop(job_id):
                event.set()
        if job_ids is None or any(job_id in self._drains for job_id in job_ids):
            self._poll.set()

    def wake_poll(self) -> None:
        """Wake the poll now (a create's answer was lost: its job may wait for adoption)."""
        self._poll.set()

    def next_poll(self) -> trio.Event:
        """A fresh event, set when a job this runner drains is next reported changed."""
        self._poll = trio.Event()
        return self._poll

    @contextlib.contextmanager
    def job(self, job_id: str) -> Iterator[trio.Event]:
        """An event set when ``job_id`` is next reported changed, for the block.

        Take it before reading the job, so that a change reported during the read is not missed.
        """
        event = trio.Event()
        self._jobs.setdefault(job_id, []).append(event)
        try:
            yield event
        finally:
            events = [e for e in self._jobs.get(job_id, ()) if e is not event]
            if events:
                self._jobs[job_id] = events
            else:
                self._jobs.pop(job_id, None)


async def wait_at_most(event: trio.Event, seconds: float) -> None:
    """Until ``event`` is set, or for ``seconds``, whichever comes first."""
    with trio.move_on_after(seconds):
        await event.wait()


async def poll_drain_changes(
    store: ClusterStore,
    drains: Mapping[str, _Drain],
    changes: ChangedElsewhere,
    config: Config,
    log: logging.Logger,
    adopt: Callable[[], Awaitable[None]],
) -> None:
    """Forever: apply other runners' cancels and reaps, and ``adopt()`` the runner's undrained
    jobs, as soon as ``changes`` reports one of this runner's jobs changed (or is woken), and
    at least every ``config.poll_interval``.

    A job cancelled elsewhere is cancelled here as :meth:`Runner.cancel` does (no new target,
    ``cancel_grace`` for the fetch in flight); a job reaped while this runner was paused or cut
    off has its drain stopped at once (the store refuses its writes anyway). A database that
    refuses the poll is asked again at the next one; an outage is logged once as it begins and
    once as it ends (:class:`OutageLog`). Cancellation: stops at once (shutdown).
    """
    woken = changes.next_poll()
    outage = OutageLog(log, "poll the store for other runners' changes")
    while True:
        await wait_at_most(woken, config.poll_interval)
        woken = changes.next_poll()  # before the query: a change reported during it counts
        try:
            if drains:
                _apply(await store.drain_changes(list(drains)), drains, config, log)
            await adopt()
        except StoreUnavailable as exc:  # the adoption waits for the next poll too
            outage.refused(exc)
        else:
            outage.answered()


def _apply(
    found: DrainChanges, drains: Mapping[str, _Drain], config: Config, log: logging.Logger
) -> None:
    """Stop the drains of reaped jobs, cancel those of jobs cancelled elsewhere."""
    for job_id in found.lost:
        drain = drains.get(job_id)
        if drain is not None:
            log.warning("job reaped by another runner; drain stopped", extra={"job_id": job_id})
            drain.lose()
    for job_id in found.cancelled - found.lost:
        drain = drains.get(job_id)
        if drain is not None and not drain.cancel_requested:
            log.info("job cancelled through another runner", extra={"job_id": job_id})
            drain.request_cancel(config.cancel_grace, stored=True)


async def wait_for_heartbeat(store: ClusterStore, drain: _Drain, interval: float) -> None:
    """Sleep until the store allows a new target (its runner's heartbeat got through again).

    Returns early if the job is cancelled meanwhile; a reap of the job stops the drain (and
    so this wait) through :func:`poll_drain_changes`.
    """
    # A poll, not an event: the store's verdict changes with the clock (time since its last
    # heartbeat), and a heartbeat thread would otherwise have to reach into the trio run.
    while not store.can_start_target() and not drain.cancel_requested:  # noqa: ASYNC110
        await trio.sleep(interval)


async def release(store: ClusterStore | None, drain: _Drain, log: logging.Logger) -> None:
    """Tell waiters on other runners that the drain of this (terminal) job has stopped."""
    if store is None or drain.lost:
        return  # no other runner; or the reap already took the job away from this runner
    try:
        await store.release_job(drain.job_id)
    except StoreUnavailable:
        # Waiters elsewhere then see the drain over once this runner shuts down or is reaped.
        extra = {"job_id": drain.job_id}
        log.warning("could not release a stopped job", exc_info=True, extra=extra)


async def wait_elsewhere(
    store: JobStore,
    cluster: ClusterStore,
    job_id: str,
    changes: ChangedElsewhere,
    *,
    now: Callable[[], float],
    interval: float,
    closing: Callable[[], bool],
) -> Job | None:
    """Re-read ``job_id``, which this runner does not drain, until no outcome of it can follow:
    whenever ``changes`` reports it changed, and at least every ``interval``.

    Returns the job once it is terminal and its drain (on another runner) has stopped, or
    None once it is unknown or lapsed (read again when its lease as read lapses). Once
    ``closing()`` (this runner is shutting down), returns the job as last read.
    Cancellation: safe at any point (a wait registered with the store stays registered: the
    job's end notifies the listeners once more).
    """
    watched = checked = False
    while True:
        with changes.job(job_id) as changed:
            job = await store.get_job(job_id, now=now())
            if job is None or (job.is_terminal and await cluster.drain_over(job_id)):
                if job is not None and job.targets_done < job.targets_total and not checked:
                    checked = True  # its last outcome may have come since the read: once more
                    continue
                return job
            if not watched and not await watch(cluster, job):
                continue  # it ended before the store heard of the wait: read it again
            watched = True
            # Its lapse is told by no one: read it again then, to answer None.
            await wait_at_most(changed, min(interval, job.expires_at - now()))
        if closing():
            return job


async def watch(store: ClusterStore, job: Job) -> bool:
    """Ask the runner draining ``job`` to notify its end; False if it ended before the store
    took the request (:meth:`ClusterStore.watch_job`). Called after taking
    :meth:`ChangedElsewhere.job`'s event and reading the job. Asked of a terminal job too: a
    cancelled one whose last outcome is in flight ends its drain with that outcome, no
    release to tell of it."""
    return await store.watch_job(job.id)
