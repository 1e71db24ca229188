"""Runners that share one database (PostgreSQL): what a runner learns of the others' doings.

A runner cannot be told directly that another runner cancelled one of its jobs, or reaped it
while it was paused: it polls the store for such changes every ``Config.poll_interval`` seconds
(:func:`poll_drain_changes`) and applies them exactly as a local cancel would. Waiting on a job
another runner drains is polling too (:func:`wait_elsewhere`). With one runner per database
(SQLite) the store answers these without a query and nothing changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import trio

from ._config import Config
from ._drain import _Drain
from ._errors import StoreUnavailable
from ._model import Job
from .store import JobStore

__all__ = ["poll_drain_changes", "release", "wait_elsewhere", "wait_for_heartbeat"]


async def poll_drain_changes(
    store: JobStore, drains: Mapping[str, _Drain], config: Config, log: logging.Logger
) -> None:
    """Forever: every ``config.poll_interval``, apply other runners' cancels and reaps.

    A job cancelled elsewhere is cancelled here as :meth:`Runner.cancel` does (no new target,
    ``cancel_grace`` for the fetch in flight); a job reaped while this runner was paused or cut
    off has its drain stopped at once (the store refuses its writes anyway). A database that
    refuses the poll is asked again at the next one. Cancellation: stops at once (shutdown).
    """
    while True:
        await trio.sleep(config.poll_interval)
        if not drains:
            continue
        try:
            changes = await store.drain_changes(list(drains))
        except StoreUnavailable:
            log.warning("could not poll for jobs cancelled by other runners", exc_info=True)
            continue
        for job_id in changes.lost:
            drain = drains.get(job_id)
            if drain is not None:
                log.warning("job reaped by another runner; drain stopped", extra={"job_id": job_id})
                drain.lose()
        for job_id in changes.cancelled - changes.lost:
            drain = drains.get(job_id)
            if drain is not None and not drain.cancel_requested:
                log.info("job cancelled through another runner", extra={"job_id": job_id})
                drain.request_cancel(config.cancel_grace, stored=True)


async def wait_for_heartbeat(store: JobStore, drain: _Drain, interval: float) -> None:
    """Sleep until the store allows a new target (its runner's heartbeat got through again).

    Returns early if the job is cancelled meanwhile; a reap of the job stops the drain (and
    so this wait) through :func:`poll_drain_changes`.
    """
    # A poll, not an event: the store's verdict changes with the clock (time since its last
    # heartbeat), and a heartbeat thread would otherwise have to reach into the trio run.
    while not store.can_start_target() and not drain.cancel_requested:  # noqa: ASYNC110
        await trio.sleep(interval)


async def release(store: JobStore, drain: _Drain, log: logging.Logger) -> None:
    """Tell waiters on other runners that the drain of this (terminal) job has stopped."""
    if drain.lost:
        return  # the reap already took the job away from this runner
    try:
        await store.release_job(drain.job_id)
    except StoreUnavailable:
        # Waiters elsewhere then see the drain over once this runner shuts down or is reaped.
        extra = {"job_id": drain.job_id}
        log.warning("could not release a stopped job", exc_info=True, extra=extra)


async def wait_elsewhere(
    store: JobStore,
    job_id: str,
    *,
    now: Callable[[], float],
    interval: float,
    closing: Callable[[], bool],
) -> Job | None:
    """Poll ``job_id``, which this runner does not drain, until no outcome of it can follow.

    Returns the job once it is terminal and its drain (on another runner) has stopped, or
    None once it is unknown or lapsed. Once ``closing()`` (this runner is shutting down),
    returns the job as last read. Cancellation: safe at any point.
    """
    while True:
        job = await store.get_job(job_id, now=now())
        if job is None or (job.is_terminal and await store.drain_over(job_id)):
            return job
        await trio.sleep(interval)
        if closing():
            return job
