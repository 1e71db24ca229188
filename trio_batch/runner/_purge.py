"""Retention: lapsed jobs deleted in small batches that yield to the jobs being drained.

A lapsed job reads as gone at once; deleting it is housekeeping, and must not slow the jobs
running meanwhile. On SQLite a drain's write that meets a purge batch holding the write lock
waits for it, so the purge paces itself by the time its own batches take.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import trio

from .._errors import StoreUnavailable
from .._outage_log import OutageLog
from ..store import JobStore

__all__ = [
    "PURGE_BATCH",
    "PURGE_PAUSE_BUSY",
    "PURGE_PAUSE_IDLE",
    "purge_lapsed",
    "purge_periodically",
]

#: Lapsed jobs deleted per purge transaction: keeps the write lock short (a few ms).
PURGE_BATCH = 20
#: How long the purge pauses after a batch, as a multiple of the time the batch took: while
#: jobs are being drained (the purge then takes at most a quarter of the database's time), and
#: while none is (half).
PURGE_PAUSE_BUSY = 3.0
PURGE_PAUSE_IDLE = 1.0


async def purge_lapsed(
    store: JobStore, now: Callable[[], float], *, draining: Callable[[], bool]
) -> int:
    """Delete every job in ``store`` whose lease has lapsed at ``now()``; returns how many.

    Works in batches of :data:`PURGE_BATCH` jobs, each its own short transaction on the store
    thread, so target writes are never held up for more than a few milliseconds. Between
    batches it pauses: three times as long as the batch took while ``draining()`` (the caller's
    runner drains jobs), so the purge takes at most a quarter of the database's time then, and
    as long as the batch took otherwise (half). On PostgreSQL each runner purges its own
    batches (they skip each other's), each at that pace.

    Cancellation: a batch in progress completes (store calls do); the pause between batches
    can be cancelled, and what was deleted so far stays deleted.
    """
    purged = 0
    while True:
        started, started_real = trio.current_time(), time.perf_counter()
        batch = await store.purge_expired(now=now(), batch_size=PURGE_BATCH)
        purged += batch
        if batch < PURGE_BATCH:
            return purged
        # The batch's time on trio's clock, but never more than it really took: a test's
        # autojump clock leaps to the next timer while the batch is on the store thread, and a
        # pause stretched by the leap would let other timers fire. (With trio's own clock the
        # two are the same; a clock that stands still gives no pause.)
        took = min(trio.current_time() - started, time.perf_counter() - started_real)
        # Jobs draining meanwhile: their writes wait for a batch that holds the lock, so the
        # purge pauses longer (docs/explanation/performance.md has the figures).
        pause = PURGE_PAUSE_BUSY if draining() else PURGE_PAUSE_IDLE
        await trio.sleep(pause * took)


async def purge_periodically(
    purge: Callable[[], Awaitable[int]], interval: float, log: logging.Logger
) -> None:
    """Call ``purge`` (a runner's :meth:`~trio_batch.Runner.purge_expired`) every ``interval``
    seconds, for ever; a store out of reach is logged as an outage (once as it begins, once
    as it ends), never raised. Cancellation: stops at once; a batch in progress completes."""
    outage = OutageLog(log, "purge lapsed jobs")
    while True:
        try:
            purged = await purge()
        except StoreUnavailable as exc:
            outage.refused(exc)
        else:
            outage.answered()
            if purged:
                log.info("lapsed jobs purged", extra={"jobs": purged})
        await trio.sleep(interval)
