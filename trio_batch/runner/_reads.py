"""The runner's reads of one job: its status, overview and one target as stored (with the
target in flight shown ``running``), and where its terminal event's delivery stands."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from .._event import Delivery
from .._model import Job, TargetStatus, is_job_id, with_running
from ..store import JobStore
from ._deliveries import Deliveries
from ._drain import _Drain

__all__ = ["JobReads"]


class JobReads:
    """The runner's calls that read one job (mixed into :class:`~trio_batch.Runner`, whose
    state they read). Each is a cancel point before it reads, and answers None for an id that
    is malformed, unknown or lapsed."""

    _store: JobStore
    _now: Callable[[], float]
    _drains: dict[str, _Drain]
    _deliveries: Deliveries

    if TYPE_CHECKING:  # the Runner's own, which these calls use

        def _check_running(self) -> None: ...

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
        # Read before the snapshot: a target in flight then is still pending, or done, in it.
        drain = self._drains.get(job_id)
        in_flight = None if drain is None else drain.in_flight
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
        drain = self._drains.get(job_id)
        in_flight = None if drain is None else drain.in_flight
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
        drain = self._drains.get(job_id)
        in_flight = None if drain is None else drain.in_flight
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
