"""The drain loop: one task per job, fetching its targets in order and storing each outcome
before the next starts (mixed into :class:`~trio_batch.Runner`, whose state it reads).

Every outcome is written through the :class:`~trio_batch.JobStore` with a call that cannot be
cancelled, so no cancellation can leave it half-written.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import trio

from .._config import Config
from .._errors import StoreUnavailable
from .._model import Job, JobState, OutcomeWrite, Result, outcome_write
from .._text import safe_text
from .._tracing import Tracing
from ..store import DECLINED, Declined, JobStore, Stored
from ._attempts import Attempts, Failure
from ._cluster import release, wait_for_heartbeat
from ._deliveries import Deliveries
from ._drain import _Drain
from ._store_retry import retry_refused

__all__ = ["ADOPT_MAX", "IN_DOUBT_MAX", "DrainLoop"]

#: Most undrained jobs one poll adopts (see :meth:`DrainLoop._adopt_undrained`): a bounded read.
ADOPT_MAX = 16
#: Most creates in doubt remembered for :meth:`DrainLoop._release_in_doubt` (the oldest go).
IN_DOUBT_MAX = 1024
#: ``OutcomeWrite.stored_since`` of a write right after a job answer: nothing counted since.
_NONE_SINCE = (0, 0)


def _declined(write: OutcomeWrite, *, ttl: float, now: float) -> Declined:
    """:meth:`JobStore.record_outcome_now` for a store whose calls are traced: declines."""
    return DECLINED


def _log_refused(log: logging.Logger, drain: _Drain, idx: int) -> None:
    """The store refused a drain's outcome (nothing was written): its job lapsed, was
    forgotten, or was reaped by another runner while this one was cut off. Said, so that an
    operator sees why the drain stopped (a reap found by the poll first is logged there)."""
    if not drain.lost:
        log.warning(
            "outcome refused: the job lapsed or is no longer this runner's; drain stopped",
            extra={"job_id": drain.job_id, "idx": idx},
        )


class DrainLoop:
    """The runner's drain tasks (mixed into :class:`~trio_batch.Runner`)."""

    _store: JobStore
    _tracing: Tracing
    _config: Config
    _now: Callable[[], float]
    _log: logging.Logger
    _attempts: Attempts
    _deliveries: Deliveries
    _drains: dict[str, _Drain]
    # While the poll reads the undrained jobs: the drains unregistered meanwhile.
    _dropped_during_read: set[str] | None
    # Creates whose answer was lost (oldest first), until a poll has looked for their jobs.
    _in_doubt: dict[str, None]
    _nursery: trio.Nursery
    _closed: bool
    _stopped_by_shutdown: set[str]

    def _start_drain(self, drain: _Drain, job: Job) -> None:
        """Start the task of ``drain`` (registered already) on ``job``, as the store answered."""
        drain.job = job
        drain.started = True
        self._nursery.start_soon(self._drain, drain, name=f"trio_batch drain {job.id}")

    def _unregister(self, drain: _Drain) -> None:
        """``drain`` is over (its task ended, or it never started): waiters and watchers wake."""
        del self._drains[drain.job_id]
        if self._dropped_during_read is not None:
            self._dropped_during_read.add(drain.job_id)
        drain.stopped.set()
        drain.notify_stored()  # watchers re-read and see the job without a drain task

    async def _adopt_undrained(self) -> None:
        """Start a drain for each live job of this runner's that has none (at most
        ``ADOPT_MAX``): its create committed but the submit raised, the answer lost
        (:meth:`JobStore.undrained_jobs`). Raises :class:`StoreUnavailable`.

        A job whose drain was registered at any moment of the read is left: its create was
        under way (or ended, then its drain ran). Cancellation: nothing started.
        """
        dropped: set[str] = set()
        self._dropped_during_read = dropped
        try:
            found = await self._store.undrained_jobs(
                list(self._drains), now=self._now(), limit=ADOPT_MAX
            )
        finally:
            self._dropped_during_read = None
        for job, targets in found:
            if job.id in self._drains or job.id in dropped or self._closed or job.is_terminal:
                continue
            self._log.warning(
                "job created but its answer lost; drain started", extra={"job_id": job.id}
            )
            drain = _Drain(job.id, job.caller, targets)
            if self._tracing.enabled:  # the span a submit's drain has (the submit's was dropped)
                drain.span = self._tracing.job_started(job.id, job.caller_class, job.targets_total)
            self._drains[job.id] = drain
            self._start_drain(drain, job)
        if len(found) < ADOPT_MAX:  # every live one was found: the others are not live
            await self._release_in_doubt([i for i in self._in_doubt if i not in dropped])

    def _in_doubt_add(self, job_id: str) -> None:
        """Remember ``job_id``, whose create raised StoreUnavailable: perhaps committed."""
        if len(self._in_doubt) >= IN_DOUBT_MAX:
            del self._in_doubt[next(iter(self._in_doubt))]
        self._in_doubt[job_id] = None

    async def _release_in_doubt(self, job_ids: list[str]) -> None:
        """Release the jobs of ``job_ids`` (creates in doubt, none of them live and undrained)
        that were cancelled before the poll could adopt them: no drain ever releases them, and
        waits on other runners would last until this one stops. Forgets them (the adopted
        too). Raises StoreUnavailable, those not released yet still remembered; cancellation
        leaves the same."""
        asked = [job_id for job_id in job_ids if job_id not in self._drains]
        for job_id in job_ids:
            if job_id in self._drains:  # adopted
                self._in_doubt.pop(job_id, None)
        if not asked:
            return
        changes = await self._store.drain_changes(asked)
        for job_id in asked:
            if job_id in changes.cancelled - changes.lost and job_id not in self._drains:
                await self._store.release_job(job_id)
            self._in_doubt.pop(job_id, None)

    async def _drain(self, drain: _Drain) -> None:
        """Fetch the job's targets in order, storing each outcome before the next starts."""
        self._tracing.enter_job(drain.span)  # this task's context: its store calls are children
        # Outcomes (and failures) the store answered STORED for since drain.job, the last job
        # it answered: the drain counts them itself; and the time of the last.
        since, since_at = _NONE_SINCE, 0.0
        try:
            with drain.scope:
                job: Job | None = None
                # Checked once per job: a fetch with no timeout, grace, retry or tracing
                # around it is called as it is; a traced store call is never bypassed.
                plain = self._attempts.plain
                write_now = _declined if self._tracing.enabled else self._store.record_outcome_now
                ttl = self._config.ttl
                self._attempts.enter_job(drain)
                for idx, target in enumerate(drain.targets):
                    if not self._store.can_start_target():
                        # Other runners may be about to take this one for dead: wait for a
                        # heartbeat to get through (a reap stops the drain meanwhile).
                        await wait_for_heartbeat(self._store, drain, self._config.poll_interval)
                    if drain.cancel_requested:
                        break
                    drain.in_flight = idx
                    if plain:
                        result, attempts = await self._attempts.fetch_once(drain, idx, target), 1
                    else:
                        result, attempts = await self._attempts.run(drain, idx, target)
                    write = self._outcome_write(drain, idx, result, attempts, since)
                    # On the spot if the store can (no yield, no cancel point); else the async
                    # call at once (the same moment), which also retries a refusal (nothing
                    # was written).
                    now = self._now()
                    try:
                        answer = write_now(write, ttl=ttl, now=now)
                    except StoreUnavailable:
                        answer = DECLINED
                    if isinstance(answer, Declined):
                        try:
                            answer = await self._store.record_outcome(write, ttl=ttl, now=now)
                        except StoreUnavailable as exc:
                            answer = await self._store_retried(drain, write, exc)
                    if isinstance(answer, Stored):  # the job as the drain counts it, live
                        since = (since[0] + 1, since[1] + (write.error is not None))
                        since_at = now
                        self._counted(drain, idx, write.error is None)
                        drain.in_flight = None
                        continue
                    job, since = answer, _NONE_SINCE
                    terminal = self._outcome_stored(drain, idx, job, write.error is None)
                    drain.in_flight = None
                    if job is None:
                        _log_refused(self._log, drain, idx)
                        break
                    if terminal:
                        break  # finished, or cancelled while the target ran
                if since is not _NONE_SINCE:  # stopped early: the job as counted
                    job = self._counted_job(drain, since, since_at)
                    since = _NONE_SINCE
                if drain.cancel_requested and (job is None or not job.is_terminal):
                    # Normally cancel() has marked the job; if its write failed, do it here.
                    await drain.cancel_settled.wait()
                    if drain.cancel_failed:
                        await self._finish_when_possible(drain, JobState.CANCELLED, None)
                if job is None or job.targets_done < job.targets_total:
                    # Stopped early (cancelled here or elsewhere): tell waiters on other runners.
                    await release(self._store, drain, self._log)
        except Exception as exc:
            self._tracing.job_failed(drain.span, exc)
            # The database stayed unavailable past Config.store_retry_for (or a bug): fail the
            # job rather than the host's nursery, and keep the runner serving other calls.
            self._log.error(
                "job drain failed",
                exc_info=True,
                extra={"job_id": drain.job_id, "caller": drain.caller, "idx": drain.in_flight},
            )
            reason = f"{type(exc).__name__}: {exc}"
            if drain.in_flight is not None:
                reason = f"could not store the outcome of target {drain.in_flight}: {reason}"
            await self._finish_when_possible(drain, JobState.FAILED, safe_text(reason))
            await release(self._store, drain, self._log)
        finally:
            if since is not _NONE_SINCE:  # the drain failed: the job as counted, for its span
                self._counted_job(drain, since, since_at)
            if self._closed:
                self._stopped_by_shutdown.add(drain.job_id)
            drain.in_flight = None
            self._tracing.job_ended(drain.span, drain.job, cancelled=drain.cancel_requested)
            self._unregister(drain)

    async def _finish_when_possible(
        self, drain: _Drain, status: JobState, error: str | None
    ) -> None:
        """Set the job's terminal status, retrying with backoff until the database takes it.

        Cancellation (shutdown) stops the retries; the job is then reaped at shutdown or at the
        next start.
        """
        await retry_refused(
            lambda: self._store.finish_job(drain.job_id, status, error=error, now=self._now()),
            what="set the job's status",
            give_up_at=None,
            log=self._log,
            extra={"job_id": drain.job_id, "status": str(status)},
        )
        self._deliveries.wake()

    def _outcome_write(
        self,
        drain: _Drain,
        idx: int,
        result: Result | Failure,
        attempts: int,
        since: tuple[int, int],
    ) -> OutcomeWrite:
        """The write that stores ``result`` as the outcome of target ``idx`` (``since``: the
        outcomes counted into ``drain.job`` by the drain)."""
        if isinstance(result, Result):
            return outcome_write(
                drain.job_id,
                idx,
                result,
                None,
                None,
                attempts,
                drain.job,
                self._config.max_result_size,
                since,
            )
        return outcome_write(
            drain.job_id,
            idx,
            None,
            result.error,
            result.hint,
            attempts,
            drain.job,
            self._config.max_result_size,
            since,
        )

    async def _store_retried(
        self, drain: _Drain, write: OutcomeWrite, refused: StoreUnavailable
    ) -> Job | Stored | None:
        """Store an outcome the database refused (``refused``), retrying with backoff for up to
        ``Config.store_retry_for`` seconds; raises StoreUnavailable once time is up.

        Each attempt cannot be cancelled (see JobStore.record_outcome): in effect shielded, and
        bounded by the store's own timeouts; the waits between them can be (at shutdown).
        """
        return await retry_refused(
            lambda: self._store.record_outcome(write, ttl=self._config.ttl, now=self._now()),
            what="store an outcome",
            give_up_at=trio.current_time() + self._config.store_retry_for,
            log=self._log,
            extra={"job_id": drain.job_id, "idx": write.idx},
            refused=refused,
        )

    def _counted(self, drain: _Drain, idx: int, done: bool) -> None:
        """Note the store's :data:`~trio_batch.store.STORED` for target ``idx``'s write
        (``done``: a success): watchers wake; the drain has counted it."""
        drain.notify_stored()
        if self._log.isEnabledFor(logging.DEBUG):
            self._log.debug(
                "target stored",
                extra={"job_id": drain.job_id, "idx": idx, "status": "done" if done else "failed"},
            )

    def _counted_job(self, drain: _Drain, since: tuple[int, int], at: float) -> Job | None:
        """The job as the drain has counted it (``since`` outcomes stored after ``drain.job``,
        the last at ``at``), held from now on as ``drain.job``: built only when a drain stops
        before its job's end."""
        seen = drain.job
        if seen is not None:
            drain.job = seen = dataclasses.replace(
                seen,
                targets_done=seen.targets_done + since[0],
                targets_failed=seen.targets_failed + since[1],
                updated_at=at,
                expires_at=at + self._config.ttl,
            )
        return seen

    def _outcome_stored(self, drain: _Drain, idx: int, job: Job | None, done: bool) -> bool:
        """Note the store's answer to target ``idx``'s write (``done``: a success): the drain
        holds it, watchers wake, and a terminal job's deliveries. True if the job is terminal."""
        drain.job = job
        self._counted(drain, idx, done)
        if job is None or job.status.is_live:
            return False
        self._deliveries.wake()
        if self._log.isEnabledFor(logging.INFO):
            self._log.info(
                "job finished",
                extra={"job_id": drain.job_id, "caller": drain.caller, "status": str(job.status)},
            )
        return True
