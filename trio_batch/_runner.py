"""The runner: one drain task per job, each fetching its job's targets one at a time.

A long-lived nursery owns the drain tasks; each runs under its own ``CancelScope``. Every
outcome is written through :mod:`._access` (the loop-thread fast path or the store thread)
while shielded, so no cancellation can leave it half-written. The runner knows nothing of HTTP
or how a target is fetched: that is the injected fetch function.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from ._access import StoreAccess
from ._model import (
    BatchError,
    Config,
    Job,
    JobState,
    Result,
    Target,
    TargetState,
    TargetStatus,
    check_targets,
)
from ._store import OutcomeWrite, Store, is_job_id

__all__ = ["FetchFunc", "Runner", "RunnerClosed", "open_runner"]

FetchFunc = Callable[[Target], Awaitable[Result]]
"""The injected per-target work: an async function from a :class:`Target` to a :class:`Result`.

Raising any ``Exception`` fails that target (the error names the exception's type and message;
an exception's ``hint`` attribute, if it is a string, becomes the target's hint). The job goes on.
"""

#: Longest error or hint text stored for a target.
MAX_ERROR_LENGTH = 4096


class RunnerClosed(BatchError):
    """The runner has shut down (or is shutting down) and takes no new jobs. HTTP 503."""

    http_status = 503


@dataclass(frozen=True, slots=True)
class _Failure:
    error: str
    hint: str | None = None


@dataclass(eq=False, slots=True)
class _Drain:
    """What the runner knows about one job it is draining."""

    job_id: str
    caller: str
    targets: tuple[Target, ...]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    stopped: trio.Event = field(default_factory=trio.Event)
    in_flight: int | None = None
    cancel_requested: bool = False
    # Replaced by a fresh event, and set, each time an outcome is stored: wakes watchers.
    stored: trio.Event = field(default_factory=trio.Event)

    def notify_stored(self) -> None:
        stored, self.stored = self.stored, trio.Event()
        stored.set()


def _safe_text(value: object, limit: int = MAX_ERROR_LENGTH) -> str:
    """Render ``value`` as storable text: never raises, no lone surrogates, bounded length."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # a hostile __str__ must not take the runner down
        text = f"<unprintable {type(value).__name__}>"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _failure_from_exception(exc: Exception) -> _Failure:
    message = _safe_text(exc)
    error = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    hint = getattr(exc, "hint", None)
    return _Failure(_safe_text(error), None if hint is None else _safe_text(hint))


class Runner:
    """Runs jobs: submit, cancel, status, wait. Get one from :func:`open_runner`.

    Every method may be called from any task of the trio run that opened the runner.
    """

    def __init__(
        self,
        *,
        store: Store,
        fetch: FetchFunc,
        config: Config,
        now: Callable[[], float],
        logger: logging.Logger,
        nursery: trio.Nursery,
        access: StoreAccess,
    ) -> None:
        self._store = store
        self._fetch = fetch
        self._config = config
        self._now = now
        self._log = logger
        self._nursery = nursery
        self._access = access
        self._drains: dict[str, _Drain] = {}
        self._closed = False

    @property
    def config(self) -> Config:
        """The runner's limits."""
        return self._config

    @property
    def store(self) -> Store:
        """The store the runner writes to."""
        return self._store

    # ----------------------------------------------------------------------------------------
    # Public API

    async def submit(
        self, caller: str, caller_class: str, targets: Sequence[Target]
    ) -> tuple[str, bool]:
        """Submit a job of ``targets`` for ``caller``; returns ``(job_id, reused)``.

        If ``caller`` already submitted the same targets (same URLs, options and order) and that
        job's lease has not lapsed, its id comes back with ``reused=True``: nothing is fetched
        or written again, whatever that job's status. Otherwise the caps are checked and the job
        is created in one transaction, already ``running``, and its drain task is started.

        Raises :class:`InvalidTargets` (an empty list, a non-target, a repeated target),
        :class:`InvalidRequest` (a bad caller name), :class:`TooManyTargets`,
        :class:`CallerBusy`, :class:`Busy`, or :class:`RunnerClosed` after shutdown.

        Cancellation: once the job is being created, the creation and the start of its drain
        task complete even if this call is cancelled (``Cancelled`` is then raised at the
        caller's next checkpoint), so a created job is never left without its drain task.
        """
        self._check_open()
        checked = check_targets(targets)
        config = self._config
        with trio.CancelScope(shield=True):  # a created job must get its drain task
            job, reused = await self._access.create_job(
                caller,
                caller_class,
                checked,
                ttl=config.ttl,
                targets_per_job=config.targets_per_job,
                jobs_per_caller=config.jobs_per_caller,
                jobs_total=config.jobs_total,
                status=JobState.RUNNING,
                now=self._now(),
            )
        log_extra = {"job_id": job.id, "caller": job.caller, "targets": job.targets_total}
        if reused:
            self._log.info("job reused", extra={**log_extra, "status": str(job.status)})
            return job.id, True
        if self._closed:
            # Shutdown began while the job was being created; shutdown marks it failed.
            raise RunnerClosed("the runner is shutting down; the job was not started")
        drain = _Drain(job.id, job.caller, checked)
        self._drains[job.id] = drain
        self._nursery.start_soon(self._drain, drain, name=f"trio_batch drain {job.id}")
        self._log.info("job submitted", extra=log_extra)
        return job.id, False

    async def cancel(self, job_id: str) -> bool:
        """Cancel a live job; returns False for an unknown, lapsed or already terminal job.

        The job is marked ``cancelled`` at once. The target being fetched finishes and its
        outcome is stored; the drain task then stops, and later targets stay ``pending``.
        Use :meth:`wait` to know when the drain task has stopped.
        """
        if not is_job_id(job_id):
            return False
        drain = self._drains.get(job_id)
        if drain is not None:
            # Flag first: the drain checks it before each target, so none starts after this.
            drain.cancel_requested = True
        job = await self._access.call(Store.finish_job, job_id, JobState.CANCELLED, now=self._now())
        if job is not None:
            self._log.info("job cancelled", extra={"job_id": job_id, "caller": job.caller})
        return job is not None

    async def status(self, job_id: str) -> tuple[Job, list[TargetStatus]] | None:
        """The job and its targets as stored, or None for an unknown or lapsed id.

        The target being fetched reads as ``running``.
        """
        if not is_job_id(job_id):
            return None
        status = await self._access.get_status(job_id, now=self._now())
        drain = self._drains.get(job_id)
        if status is None or drain is None or drain.in_flight is None:
            return status
        # The store derives "running" for running jobs; a cancelled job's last fetch is known
        # only here.
        job, targets = status
        in_flight = targets[drain.in_flight]
        if in_flight.status is TargetState.PENDING:
            targets[drain.in_flight] = dataclasses.replace(in_flight, status=TargetState.RUNNING)
        return job, targets

    async def wait(self, job_id: str) -> Job | None:
        """Wait until the job is terminal and its drain task has stopped; return the job.

        After it returns no further write for the job can follow (after a cancel, that is once
        the in-flight outcome is stored). Returns None for an unknown or lapsed id. This waits
        on an event, never by polling. A job this runner is not draining is returned as stored.
        """
        if not is_job_id(job_id):
            return None
        drain = self._drains.get(job_id)
        if drain is not None:
            await drain.stopped.wait()
        return await self._access.call(Store.get_job, job_id, now=self._now())

    async def watch(self, job_id: str) -> AsyncIterator[TargetStatus | Job]:
        """Yield each stored outcome of the job in ``idx`` order, then the terminal job.

        Outcomes stored before the call come first, then each new one as soon as it is stored;
        the last item is the :class:`Job` once it is terminal and its drain task has stopped
        (as :meth:`wait` returns it). Yields nothing for an unknown or lapsed id; stops early if
        the job lapses. Waits on events, never by polling. Targets left ``pending`` (after a
        cancel, a restart or a shutdown) are not yielded.

        Cancellation: safe at any point; the iterator simply stops.
        """
        if not is_job_id(job_id):
            return
        seen = 0
        while True:
            drain = self._drains.get(job_id)
            changed = None if drain is None else drain.stored  # taken before the read: no race
            status = await self._access.get_status(job_id, now=self._now())
            if status is None:
                return
            job, targets = status
            finished = [t for t in targets if t.status in (TargetState.DONE, TargetState.FAILED)]
            for target in finished[seen:]:
                yield target
            seen = len(finished)
            if changed is None:
                if job.is_terminal:
                    yield job
                    return
                # Not drained by this runner (shutting down): nothing more will be stored here.
                return
            await changed.wait()

    # ----------------------------------------------------------------------------------------
    # Draining

    def _check_open(self) -> None:
        if self._closed:
            raise RunnerClosed("the runner has shut down")

    async def _drain(self, drain: _Drain) -> None:
        """Fetch the job's targets in order, storing each outcome before the next starts."""
        try:
            with drain.scope:
                for idx, target in enumerate(drain.targets):
                    if drain.cancel_requested:
                        break
                    drain.in_flight = idx
                    result = await self._fetch_one(drain, idx, target)
                    job = await self._store_outcome(drain, idx, result)
                    if job is None or job.is_terminal:
                        break  # lapsed, finished, or cancelled while the target ran
        except Exception as exc:
            # A store failure (or a bug): fail the job rather than the host's nursery.
            self._log.exception(
                "job drain failed", extra={"job_id": drain.job_id, "caller": drain.caller}
            )
            with trio.CancelScope(shield=True):
                try:
                    await self._access.call(
                        Store.finish_job,
                        drain.job_id,
                        JobState.FAILED,
                        error=_safe_text(f"internal error: {type(exc).__name__}: {exc}"),
                        now=self._now(),
                    )
                except Exception:
                    self._log.exception("could not mark job failed", extra={"job_id": drain.job_id})
        finally:
            drain.in_flight = None
            del self._drains[drain.job_id]
            drain.stopped.set()
            drain.notify_stored()  # watchers re-read and see the job without a drain task

    async def _fetch_one(self, drain: _Drain, idx: int, target: Target) -> Result | _Failure:
        try:
            result = await self._fetch(target)
        except Exception as exc:
            failure = _failure_from_exception(exc)
            self._log.info(
                "target failed",
                extra={"job_id": drain.job_id, "idx": idx, "error": failure.error},
            )
            return failure
        if not isinstance(result, Result):
            return _Failure(
                f"the fetch function returned {_safe_text(type(result).__name__)}, not a Result",
                hint="return trio_batch.Result(content, meta) from the fetch function",
            )
        return result

    async def _store_outcome(
        self, drain: _Drain, idx: int, result: Result | _Failure
    ) -> Job | None:
        """Store one outcome, shielded: it completes even if the drain is being cancelled."""
        success, failure = (result, None) if isinstance(result, Result) else (None, result)
        write = OutcomeWrite(
            drain.job_id,
            idx,
            result=success,
            error=failure.error if failure else None,
            hint=failure.hint if failure else None,
        )
        with trio.CancelScope(shield=True):
            job = await self._access.record_outcome(write, ttl=self._config.ttl, now=self._now())
        drain.notify_stored()
        self._log.debug(
            "target stored",
            extra={
                "job_id": drain.job_id,
                "idx": idx,
                "status": "failed" if failure else "done",
            },
        )
        if job is not None and job.is_terminal:
            self._log.info(
                "job finished",
                extra={"job_id": drain.job_id, "caller": drain.caller, "status": str(job.status)},
            )
        return job


@asynccontextmanager
async def open_runner(
    store: Store,
    fetch: FetchFunc,
    config: Config | None = None,
    *,
    now: Callable[[], float] = time.time,
    logger: logging.Logger | None = None,
) -> AsyncIterator[Runner]:
    """Start a runner on ``store``; leaving the block shuts it down.

    On entry, every job the store still holds as ``queued``/``running`` (left by a process that
    died) is marked ``failed`` with error ``"restart"``; such jobs are never resumed, and their
    completed targets stay readable until their lease lapses.

    ``now`` is the wall clock used for leases (tests inject a fake one); trio's clock is used
    for everything that sleeps. ``logger`` defaults to ``logging.getLogger("trio_batch")``.

    On exit (normal, by exception or by cancellation) in-flight fetches are cancelled, every
    outcome already being stored is completed, and every job still live is marked ``failed``
    with error ``"shutdown"``. An exception raised in the body comes out as itself, not wrapped
    in an exception group.
    """
    config = Config() if config is None else config
    log = logging.getLogger("trio_batch") if logger is None else logger
    access = StoreAccess(store)
    access.start()
    try:
        reaped = await access.call_on_thread(Store.mark_in_flight_failed, "restart", now())
        if reaped:
            log.warning("jobs left live by a previous run marked failed", extra={"jobs": reaped})
        body_error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            runner = Runner(
                store=store,
                fetch=fetch,
                config=config,
                now=now,
                logger=log,
                nursery=nursery,
                access=access,
            )
            try:
                yield runner
            except BaseException as exc:
                body_error = exc  # re-raised below, outside the nursery, so it is not wrapped
            finally:
                runner._closed = True
                nursery.cancel_scope.cancel()
        if body_error is not None:
            raise body_error
    finally:
        with trio.CancelScope(shield=True):
            try:
                stopped = await access.call_on_thread(
                    Store.mark_in_flight_failed, "shutdown", now()
                )
                if stopped:
                    log.info("live jobs marked failed at shutdown", extra={"jobs": stopped})
            finally:
                access.close()
