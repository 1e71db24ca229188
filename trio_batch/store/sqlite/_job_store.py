"""The SQLite backend's :class:`~trio_batch.store.JobStore`: one database, one runner.

Every call runs on the store thread (:class:`~trio_batch.store._thread.StoreThread`), on the
one connection of the :class:`~trio_batch.Store`, in the order made; the event loop never
waits on SQLite. Outcome writes that queue behind the commit in flight share the next one
(:class:`~trio_batch.store._face.StoreFace`), each in a savepoint of its own.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Collection
from typing import Concatenate, ParamSpec, TypeVar

from ..._event import Delivery, JobEvent
from ..._model import Job, JobState, TargetStatus
from .._face import StoreFace, TimedWrite
from .._filters import EVERY_JOB, JobFilter
from .._protocol import NewJob, ReapedJob, StoreCounts
from .._thread import Grouped
from . import _outbox
from ._errors import translate_errors
from ._lock import RunnerLock
from ._store import Store
from ._views import job_overview, latest_retry, one_target, outcomes_from, retries, targets_after

__all__ = ["SQLiteJobStore"]

P = ParamSpec("P")
T = TypeVar("T")


class SQLiteJobStore(StoreFace):
    """A :class:`~trio_batch.Store` (one SQLite database) as a :class:`~trio_batch.JobStore`.

    Get one from :func:`~trio_batch.open_store`, or wrap a store you opened yourself:
    ``SQLiteJobStore(Store.open(path))`` (``open_runner`` does that for a plain ``Store``).
    The store thread starts at the first call, from inside a trio run; :meth:`aclose` it.
    ``owns_store=True`` closes the ``Store`` too.

    One runner per database: :meth:`claim` takes a file lock beside it (see
    :class:`~trio_batch.store.sqlite._lock.RunnerLock`).
    """

    def __init__(self, store: Store, *, owns_store: bool = False) -> None:
        super().__init__(thread_name="trio_batch store")
        self.store = store
        self.location = store.path
        self._owns_store = owns_store
        # Leases on outbox rows: another owner's is a dead process's (one runner per file).
        self._owner = secrets.token_urlsafe(9)

    async def aclose(self) -> None:
        """End the store thread after its queued calls, closing the ``Store`` if this owns
        it. Later calls raise :class:`StoreError`.

        Cancellation: the closing completes; nothing is left half-closed.
        """
        if not self._closed:
            await self._stop_thread(self.store.close if self._owns_store else None)

    async def _on_thread(
        self, fn: Callable[Concatenate[Store, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``fn(store, ...)`` on the store thread. Cancellation: as
        :meth:`StoreThread.run <trio_batch.store._thread.StoreThread.run>`: once queued, the
        call completes (bounded by the busy timeout), and ``Cancelled`` is raised at the
        caller's next checkpoint."""
        self._start()
        with translate_errors(self.store.busy_timeout):
            return await self._thread.run(fn, self.store, *args, **kwargs)

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

    async def create_job(self, new: NewJob, *, now: float) -> tuple[Job, bool]:
        """:meth:`Store.create_job`: a reuse or a refusal from its first read, an insert
        under the write lock."""
        start = self._observe_start()
        answer = await self._on_thread(Store.create_job, new, now=now)
        self._observe("create_job", start)
        return answer

    async def _outcome_on_thread(self, timed: TimedWrite) -> Grouped[Job | None]:
        with translate_errors(self.store.busy_timeout):
            return await self._thread.run_grouped(self._store_outcomes, timed)

    def _store_outcomes(self, batch: list[TimedWrite]) -> list[Job | Exception | None]:
        """:meth:`Store.record_outcomes` of the writes queued together. The deadline is not
        read: each call on the thread is bounded by the busy timeout."""
        _, ttl, now, _ = batch[0]
        return self.store.record_outcomes([timed[0] for timed in batch], ttl=ttl, now=now)

    async def finish_job(
        self, job_id: str, status: JobState, *, now: float, error: str | None = None
    ) -> Job | None:
        """:meth:`Store.finish_job`."""
        return await self._on_thread(Store.finish_job, job_id, status, error=error, now=now)

    async def reap_orphans(self, *, now: float) -> list[ReapedJob]:
        """Fail every live job as ``"restart"``: with the claim held, no runner drains them."""
        return await self._on_thread(Store.fail_live, "restart", now)

    async def fail_own_jobs(self, reason: str, *, now: float) -> int:
        """Fail every live job: with the claim held, they are all this runner's."""
        return await self._on_thread(Store.mark_in_flight_failed, reason, now)

    async def purge_expired(self, *, now: float, batch_size: int) -> int:
        """One batch of :meth:`Store.purge_expired`, on the store thread."""
        return await self._on_thread(Store.purge_expired, now, batch_size=batch_size, max_batches=1)

    async def forget_job(self, job_id: str, *, caller: str | None = None, now: float) -> Job | None:
        """:meth:`Store.forget_job`, on the store thread (a delete may wait for the lock)."""
        return await self._on_thread(Store.forget_job, job_id, caller=caller, now=now)

    async def get_job(self, job_id: str, *, now: float) -> Job | None:
        """:meth:`Store.get_job`."""
        return await self._on_thread(Store.get_job, job_id, now=now)

    async def get_status(self, job_id: str, *, now: float) -> tuple[Job, list[TargetStatus]] | None:
        """:meth:`Store.get_status`."""
        return await self._on_thread(Store.get_status, job_id, now=now)

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
        self,
        job_id: str,
        start: int,
        *,
        now: float,
        limit: int,
        max_bytes: int | None = None,
        results_up_to: int | None = None,
    ) -> tuple[Job, list[TargetStatus]] | None:
        """:func:`outcomes_from`, on the store thread (results may be large to decode)."""
        return await self._on_thread(
            outcomes_from,
            job_id,
            start,
            now=now,
            limit=limit,
            max_bytes=max_bytes,
            results_up_to=results_up_to,
        )

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
        return await self._on_thread(_outbox.get_delivery, job_id, now=now)

    async def redeliver(self, job_id: str, *, now: float) -> Delivery | None:
        """:func:`_outbox.redeliver`, on the store thread."""
        return await self._on_thread(_outbox.redeliver, job_id, now=now)

    async def next_delivery_due(self) -> float | None:
        """:func:`_outbox.next_due`."""
        return await self._on_thread(_outbox.next_due)
