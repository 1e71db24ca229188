"""The PostgreSQL backend's :class:`~trio_batch.store.JobStore`: several runners, one database.

Calls run on a store thread (:class:`~trio_batch.store._thread.StoreThread`) over one
connection, in order; psycopg's sync API is used there: its async API (and asyncpg) need
asyncio's loop. Outcome writes that queue behind the commit in flight share the next one
(:class:`~trio_batch.store._face.StoreFace`, which both backends share), each one statement
that stores all of it or nothing.

A runner's :meth:`~PostgresJobStore.claim` registers it under a fresh id and, while the block
runs, heartbeats every ``heartbeat_interval`` on a second connection and thread of its own (so
a busy store thread cannot starve it) and reaps runners silent past ``runner_timeout``. If this
runner was itself reaped (paused, or cut off, for too long), it registers again under a new id
and carries on as a fresh runner: its old jobs were failed and are fenced off (:mod:`._claim`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

import trio

from ..._model import Job, Target
from .._face import StoreFace, ThreadCall, TimedWrite
from .._protocol import (
    ChangeObserver,
    ClusterStore,
    DrainChanges,
    HostLimits,
    NewJob,
    ReapedJob,
)
from .._thread import Grouped
from . import _hosts, _outbox
from ._claim import claim_runner
from ._connection import DEFAULT_STORE_TIMEOUT, safe_location
from ._errors import translate_errors
from ._listen import PROBE_INTERVAL, listen_for_changes, split_listen_option
from ._store import PostgresStore

__all__ = ["PostgresJobStore"]

P = ParamSpec("P")
T = TypeVar("T")

#: Share of ``runner_timeout`` after the last successful heartbeat past which this runner
#: starts no new target: the others may reap it soon.
FENCE_SHARE = 0.75


class PostgresJobStore(StoreFace[PostgresStore]):
    """A PostgreSQL database as a :class:`~trio_batch.JobStore` that many runners share.

    Get one from :func:`~trio_batch.open_store` with a ``postgresql://`` URL, or
    :meth:`open` it. The store thread starts at the first call, from inside a trio run;
    :meth:`aclose` it.

    Every call is bounded by ``store.store_timeout``: past it, :class:`StoreUnavailable`
    (:meth:`PostgresConnection.within`). ``listen_url``: where to LISTEN, if not the store's
    own URL (a direct URL beside a pooled one).
    """

    def __init__(
        self,
        store: PostgresStore,
        *,
        listen: bool = True,
        listen_url: str | None = None,
    ) -> None:
        super().__init__(thread_name="trio_batch postgres store")
        self.store = store
        #: Whether :meth:`listen_changes` listens (``listen=off`` in the URL: it does not).
        self.listen = listen
        #: Where :meth:`listen_changes` listens: a direct (not pooled) URL, or the store's.
        self.listen_url = store.conninfo if listen_url is None else listen_url
        #: Seconds between the listener's self-notifications (see ``_listen``).
        self.probe_interval = PROBE_INTERVAL
        self.location = store.location
        self._runner_timeout = 30.0
        # Trio time at which the last successful heartbeat (or the registration) was sent.
        self._beat_ok_at: float | None = None

    @classmethod
    def open(
        cls,
        conninfo: str,
        *,
        store_timeout: float = DEFAULT_STORE_TIMEOUT,
        connect_timeout: float | None = None,
        listen: bool = True,
        listen_url: str | None = None,
    ) -> PostgresJobStore:
        """Connect to ``conninfo`` (a ``postgresql://`` URL or libpq keywords), creating or
        migrating the schema; see :meth:`PostgresStore.open` for the errors.

        ``conninfo`` may point at a pooler in transaction mode (PgBouncer). LISTEN needs a
        session of its own: give a direct URL of the same database as ``listen_url``. Without
        one, LISTEN goes through ``conninfo`` unless that is found to be pooled: then none is sent,
        and the runner logs it once and relies on its poll. ``listen=False``, or
        ``listen=off`` in the URL, runs without LISTEN at all. ``store_timeout`` bounds every
        call (default 5 s).
        """
        conninfo, listen_in_url = split_listen_option(conninfo)
        if listen_url is not None:
            listen_url, _ = split_listen_option(listen_url)
            safe_location(listen_url)  # a malformed one: ValueError now
        return cls(
            PostgresStore.open(
                conninfo, store_timeout=store_timeout, connect_timeout=connect_timeout
            ),
            listen=listen and listen_in_url is not False,
            listen_url=listen_url,
        )

    @property
    def store_timeout(self) -> float:
        """The bound on each call, in seconds (see :class:`PostgresStore`)."""
        return self.store.store_timeout

    @property
    def runner_id(self) -> str | None:
        """The id this store's runner is registered under; None outside :meth:`claim`."""
        return self.store.runner_id

    # ----------------------------------------------------------------------------------------
    # Life cycle

    async def aclose(self) -> None:
        """End the store thread after its queued calls and close the connection. Later calls
        raise :class:`StoreError`.

        Cancellation: the closing completes; nothing is left half-closed.
        """
        if not self._closed:
            await self._stop_thread(lambda: self.store.close(final=True))

    def _deadline(self) -> float:
        """``store_timeout`` from now: an outcome write's wait in the thread's queue counts
        toward its bound."""
        return time.monotonic() + self.store.store_timeout

    async def _on_thread(
        self, fn: Callable[Concatenate[PostgresStore, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``fn(store, ...)`` on the store thread, within ``store_timeout`` of now (the time it
        waits behind earlier calls included).

        Cancellation: as :meth:`StoreThread.run`: once queued, the call completes (bounded by
        ``store_timeout``), and ``Cancelled`` is raised at the next checkpoint.
        """
        self._start()
        with translate_errors(self.store.store_timeout):
            return await self._thread.run(self.store.within, self._deadline(), fn, *args, **kwargs)

    # ----------------------------------------------------------------------------------------
    # The runner's claim: registration, heartbeats, reaping

    claim = claim_runner

    # ----------------------------------------------------------------------------------------
    # JobStore

    async def create_job(self, new: NewJob, *, now: float) -> tuple[Job, bool]:
        """:meth:`PostgresStore.create_job`: reuse, caps and insert serialised cluster-wide."""
        start = self._observe_start()
        answer = await self._on_thread(PostgresStore.create_job, new, now=now)
        self._observe("create_job", start)
        return answer

    async def _outcome_on_thread(self, timed: TimedWrite) -> Grouped[Job | None]:
        with translate_errors(self.store.store_timeout):
            return await self._thread.run_grouped(self._store_outcomes, timed)

    def _store_outcomes(self, batch: list[TimedWrite]) -> list[Job | Exception | None]:
        """:meth:`PostgresStore.record_outcomes` of the writes queued together, by the
        deadline of the first (``store_timeout`` from its call, its wait in the queue
        included). A write answers None (nothing written) also when its job is no longer
        this runner's."""
        _, ttl, now, deadline = batch[0]
        writes = [timed[0] for timed in batch]
        return self.store.within(deadline, PostgresStore.record_outcomes, writes, ttl=ttl, now=now)

    async def reap_orphans(self, *, now: float) -> list[ReapedJob]:
        """Fail (``"restart"``) the live jobs of runners silent past ``runner_timeout``, and of
        no runner; never those of a live runner. 0 if another runner is reaping right now."""
        return await self._on_thread(PostgresStore.reap, self._runner_timeout, now=now)

    finish_job = ThreadCall(PostgresStore.finish_job)
    fail_own_jobs = ThreadCall(PostgresStore.fail_own_jobs)
    purge_expired = ThreadCall(PostgresStore.purge_expired)
    forget_job = ThreadCall(PostgresStore.forget_job)
    get_job = ThreadCall(PostgresStore.get_job)
    get_status = ThreadCall(PostgresStore.get_status)
    list_jobs = ThreadCall(PostgresStore.list_jobs)
    counts = ThreadCall(PostgresStore.counts)
    get_overview = ThreadCall(PostgresStore.get_overview)
    get_target = ThreadCall(PostgresStore.get_target)
    get_outcomes = ThreadCall(PostgresStore.get_outcomes)
    list_caller_jobs = ThreadCall(PostgresStore.list_caller_jobs)
    get_targets_after = ThreadCall(PostgresStore.get_targets_after)
    latest_retry = ThreadCall(PostgresStore.latest_retry)
    retries = ThreadCall(PostgresStore.retries)
    claim_delivery = ThreadCall(_outbox.claim_delivery)
    record_delivery = ThreadCall(_outbox.record_delivery)
    get_delivery = ThreadCall(_outbox.get_delivery)
    redeliver = ThreadCall(_outbox.redeliver)
    next_delivery_due = ThreadCall(_outbox.next_due)

    # ----------------------------------------------------------------------------------------
    # ClusterStore

    def can_start_target(self) -> bool:
        """False once no heartbeat has succeeded for ``FENCE_SHARE`` of ``runner_timeout``
        (the others may be about to reap this runner); True outside :meth:`claim`."""
        if self.store.runner_id is None or self._beat_ok_at is None:
            return True
        return trio.current_time() - self._beat_ok_at < FENCE_SHARE * self._runner_timeout

    async def drain_changes(self, job_ids: Collection[str]) -> DrainChanges:
        """Which of this runner's drains were cancelled elsewhere, or reaped (one query)."""
        if not job_ids:
            return DrainChanges()
        cancelled, lost = await self._on_thread(PostgresStore.drain_changes, list(job_ids))
        return DrainChanges(frozenset(cancelled), frozenset(lost))

    async def undrained_jobs(
        self, draining: Collection[str], *, now: float, limit: int
    ) -> list[tuple[Job, tuple[Target, ...]]]:
        """:meth:`PostgresStore.undrained_jobs`: creates committed whose answer was lost."""
        return await self._on_thread(
            PostgresStore.undrained_jobs, list(draining), now=now, limit=limit
        )

    release_job = ThreadCall(PostgresStore.release_job)
    watch_job = ThreadCall(PostgresStore.watch_job)
    drain_over = ThreadCall(PostgresStore.drain_over)

    async def listen_changes(self, on_change: ChangeObserver) -> None:
        """Until cancelled, ``on_change`` with the jobs any runner notifies (``_listen``), on
        :attr:`listen_url`, checked by a self-notification every :attr:`probe_interval` sent
        through the store's own connection; returns at once if :attr:`listen` is off.
        Cancellation: stops at once."""
        if self.listen:

            async def probe(payload: str) -> None:
                await self._on_thread(PostgresStore.notify_jobs, [payload])

            await listen_for_changes(
                self.listen_url,
                on_change,
                connect_timeout=self.store.connect_timeout,
                store_timeout=self.store.store_timeout,
                probe=probe,
                probe_interval=self.probe_interval,
            )

    # ----------------------------------------------------------------------------------------
    # HostLimits

    acquire_host_slot = ThreadCall(_hosts.acquire_host_slot)
    release_host_slot = ThreadCall(_hosts.release_host_slot)
    pause_host = ThreadCall(_hosts.pause_host)


if TYPE_CHECKING:
    # The runner finds the cluster's parts by isinstance (cluster_of): here mypy checks them.
    def _cluster(face: PostgresJobStore) -> ClusterStore:
        return face

    def _host_limits(face: PostgresJobStore) -> HostLimits:
        return face
