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

from ..._event import JobEvent
from ..._model import Job
from .._face import StoreFace, ThreadCall, TimedWrite, check_paging
from .._protocol import NewJob, ReapedJob
from .._thread import Grouped
from . import _outbox, _views
from ._errors import translate_errors
from ._lock import RunnerLock
from ._store import Store

__all__ = ["SQLiteJobStore"]

P = ParamSpec("P")
T = TypeVar("T")


class SQLiteJobStore(StoreFace[Store]):
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

    async def reap_orphans(self, *, now: float) -> list[ReapedJob]:
        """Fail every live job as ``"restart"``: with the claim held, no runner drains them."""
        return await self._on_thread(Store.fail_live, "restart", now)

    async def purge_expired(self, *, now: float, batch_size: int) -> int:
        """One batch of :meth:`Store.purge_expired`, on the store thread."""
        paging = {"batch_size": batch_size}
        check_paging(paging)
        return await self._on_thread(
            Store.purge_expired, now, batch_size=paging["batch_size"], max_batches=1
        )

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

    finish_job = ThreadCall(Store.finish_job)
    # With the claim held, every live job is this runner's.
    fail_own_jobs = ThreadCall(Store.mark_in_flight_failed)
    forget_job = ThreadCall(Store.forget_job)
    get_job = ThreadCall(Store.get_job)
    get_status = ThreadCall(Store.get_status)
    list_jobs = ThreadCall(Store.list_jobs)
    get_overview = ThreadCall(_views.job_overview)
    get_target = ThreadCall(_views.one_target)
    get_outcomes = ThreadCall(_views.outcomes_from)
    list_caller_jobs = ThreadCall(Store.list_caller_jobs)
    get_targets_after = ThreadCall(_views.targets_after)
    latest_retry = ThreadCall(_views.latest_retry)
    retries = ThreadCall(_views.retries)
    counts = ThreadCall(Store.counts)
    get_delivery = ThreadCall(_outbox.get_delivery)
    redeliver = ThreadCall(_outbox.redeliver)
    next_delivery_due = ThreadCall(_outbox.next_due)
