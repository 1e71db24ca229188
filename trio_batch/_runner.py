"""The runner: one drain task per job, each fetching its job's targets one at a time.

A long-lived nursery owns the drain tasks; each runs under its own ``CancelScope``. Every
outcome is written through :mod:`._access` (the loop-thread fast path or the store thread)
while shielded, so no cancellation can leave it half-written. The runner knows nothing of HTTP
or how a target is fetched: that is the injected fetch function.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from ._access import StoreAccess
from ._lock import RunnerLock
from ._model import (
    Config,
    Job,
    JobState,
    Result,
    RunnerClosed,
    StoreUnavailable,
    Target,
    TargetState,
    TargetStatus,
    check_caller,
    check_targets,
    safe_text,
)
from ._store import OutcomeWrite, Store, is_job_id, new_job_id

__all__ = ["FetchFunc", "Runner", "RunnerClosed", "open_runner"]

FetchFunc = Callable[[Target], Awaitable[Result]]
"""The injected per-target work: an async function from a :class:`Target` to a :class:`Result`.

Raising any ``Exception`` fails that target (the error names the exception's type and message;
an exception's ``hint`` attribute, if it is a string, becomes the target's hint). The job goes on.
"""

#: Backoff between attempts at a write the database refused, in seconds.
RETRY_FIRST_DELAY = 0.05
RETRY_MAX_DELAY = 2.0
#: Lapsed jobs deleted per purge transaction: keeps the write lock short (a few ms).
PURGE_BATCH = 20


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
    # The CancelScope around the fetch in flight: its deadline is the target timeout, moved
    # earlier by a cancel when Config.cancel_grace is set.
    fetch_scope: trio.CancelScope | None = None
    cancel_requested: bool = False
    cancel_deadline: float | None = None  # trio time at which the cancel grace runs out
    # Set once every cancel() call has finished writing; cancel_failed if one could not.
    cancel_writes: int = 0
    cancel_settled: trio.Event = field(default_factory=trio.Event)
    cancel_failed: bool = False
    # Replaced by a fresh event, and set, each time an outcome is stored: wakes watchers.
    stored: trio.Event = field(default_factory=trio.Event)

    def notify_stored(self) -> None:
        stored, self.stored = self.stored, trio.Event()
        stored.set()


def _failure_from_exception(exc: Exception) -> _Failure:
    message = safe_text(exc)
    error = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    hint = getattr(exc, "hint", None)
    return _Failure(safe_text(error), None if hint is None else safe_text(hint))


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
        # Set once shutdown has tried to mark the live jobs failed ("shutdown"); ok if it did.
        self._shutdown_marked = trio.Event()
        self._shutdown_marked_ok = False

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

        The caps are the :class:`Config`'s, with ``targets_per_job`` and ``jobs_per_caller``
        overridden for ``caller_class`` by ``Config.class_limits``.

        Raises :class:`InvalidTargets` (an empty list, a non-target, a repeated target),
        :class:`InvalidRequest` (a bad caller name), :class:`TooManyTargets`,
        :class:`CallerBusy`, :class:`Busy`, :class:`StoreUnavailable` if the database refuses
        the write, or :class:`RunnerClosed` after shutdown.

        Cancellation: once the job is being created, the creation and the start of its drain
        task complete even if this call is cancelled (``Cancelled`` is then raised at the
        caller's next checkpoint), so a created job is never left without its drain task.
        """
        self._check_open()
        caller = check_caller(caller)
        caller_class = check_caller(caller_class, "caller_class")
        checked = check_targets(targets)
        config = self._config
        targets_per_job, jobs_per_caller = config.limits_for(caller_class)
        # The drain is registered before the job exists, under the id the job will get: the
        # moment another task can see the job (a reuse, a listing), cancel() and wait() find
        # its drain.
        drain = _Drain(new_job_id(), caller, checked)
        self._drains[drain.job_id] = drain
        started = False
        try:
            with trio.CancelScope(shield=True):  # a created job must get its drain task
                job, reused = await self._access.create_job(
                    caller,
                    caller_class,
                    checked,
                    ttl=config.ttl,
                    targets_per_job=targets_per_job,
                    jobs_per_caller=jobs_per_caller,
                    jobs_total=config.jobs_total,
                    status=JobState.RUNNING,
                    job_id=drain.job_id,
                    now=self._now(),
                )
            log_extra = {"job_id": job.id, "caller": job.caller, "targets": job.targets_total}
            if reused:
                self._log.info("job reused", extra={**log_extra, "status": str(job.status)})
                return job.id, True
            if self._closed:
                # Shutdown began while the job was being created; shutdown marks it failed.
                raise RunnerClosed("the runner is shutting down; the job was not started")
            self._nursery.start_soon(self._drain, drain, name=f"trio_batch drain {job.id}")
            started = True
        finally:
            if not started:
                del self._drains[drain.job_id]
                drain.stopped.set()
        self._log.info("job submitted", extra=log_extra)
        return job.id, False

    async def cancel(self, job_id: str) -> bool:
        """Cancel a live job; returns False for an unknown, lapsed or already terminal job.

        The job is marked ``cancelled`` at once. The target being fetched finishes and its
        outcome is stored; the drain task then stops, and later targets stay ``pending``. With
        ``Config.cancel_grace`` set, a fetch still running that long after the cancel is
        cancelled and its target stored as failed with error ``"cancelled"``. Use :meth:`wait`
        to know when the drain task has stopped.

        If the database refuses the write, :class:`StoreUnavailable` is raised; the drain task
        still stops before its next target and marks the job cancelled once the database
        accepts it.
        """
        if not is_job_id(job_id):
            return False
        drain = self._drains.get(job_id)
        if drain is not None:
            # Flag first: the drain checks it before each target, so none starts after this.
            drain.cancel_requested = True
            grace = self._config.cancel_grace
            if grace is not None and drain.cancel_deadline is None:
                drain.cancel_deadline = trio.current_time() + grace
                if drain.fetch_scope is not None:
                    drain.fetch_scope.deadline = min(
                        drain.fetch_scope.deadline, drain.cancel_deadline
                    )
            drain.cancel_writes += 1
        try:
            job = await self._access.call(
                Store.finish_job, job_id, JobState.CANCELLED, now=self._now()
            )
        except BaseException:
            if drain is not None:
                drain.cancel_failed = True  # the drain marks the job cancelled once it can
            raise
        finally:
            if drain is not None:
                drain.cancel_writes -= 1
                if drain.cancel_writes == 0:
                    drain.cancel_settled.set()
        if job is not None:
            self._log.info("job cancelled", extra={"job_id": job_id, "caller": job.caller})
        return job is not None

    async def status(self, job_id: str) -> tuple[Job, list[TargetStatus]] | None:
        """The job and its targets as stored, or None for an unknown or lapsed id.

        The target being fetched reads as ``running``.
        """
        if not is_job_id(job_id):
            return None
        # Read before the snapshot: a target in flight then is still pending, or done, in it.
        drain = self._drains.get(job_id)
        in_flight = None if drain is None else drain.in_flight
        status = await self._access.get_status(job_id, now=self._now())
        if status is None or in_flight is None:
            return status
        # The store derives "running" for running jobs; a cancelled job's last fetch is known
        # only here.
        job, targets = status
        if targets[in_flight].status is TargetState.PENDING:
            targets[in_flight] = dataclasses.replace(targets[in_flight], status=TargetState.RUNNING)
        return job, targets

    async def wait(self, job_id: str) -> Job | None:
        """Wait until the job is terminal and its drain task has stopped; return the job.

        After it returns no further write for the job can follow (after a cancel, that is once
        the in-flight outcome is stored). Returns None for an unknown or lapsed id. This waits
        on an event, never by polling. A job this runner is not draining is returned as stored.
        A job stopped by the runner's shutdown comes back ``failed`` with error ``"shutdown"``
        once shutdown has marked it so (as stored, if the database refused that). After the
        runner has stopped, raises :class:`RunnerClosed`.
        """
        if not is_job_id(job_id):
            return None
        drain = self._drains.get(job_id)
        if drain is not None:
            await drain.stopped.wait()
        job = await self._access.call(Store.get_job, job_id, now=self._now())
        if job is not None and not job.is_terminal and self._closed:
            # Its drain was stopped by the shutdown, which marks it failed next: report that.
            await self._shutdown_marked.wait()
            if self._shutdown_marked_ok:
                job = dataclasses.replace(job, status=JobState.FAILED, error="shutdown")
        return job

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

    async def purge_expired(self) -> int:
        """Delete every job whose lease has lapsed, with its targets; returns how many.

        Works in small batches, each its own short transaction on the store thread, so target
        writes are never held up for more than a few milliseconds; between batches it pauses as
        long as the batch took, so a big backlog takes at most half of the database's time.
        The runner also does this every ``Config.purge_interval`` seconds.
        """
        purged = 0
        while True:
            started = time.perf_counter()
            batch = await self._access.call_on_thread(
                Store.purge_expired, self._now(), batch_size=PURGE_BATCH, max_batches=1
            )
            purged += batch
            if batch < PURGE_BATCH:
                return purged
            await trio.sleep(time.perf_counter() - started)

    async def _purge_periodically(self) -> None:
        while True:
            try:
                purged = await self.purge_expired()
                if purged:
                    self._log.info("lapsed jobs purged", extra={"jobs": purged})
            except StoreUnavailable:
                self._log.warning("could not purge lapsed jobs", exc_info=True)
            await trio.sleep(self._config.purge_interval)

    # ----------------------------------------------------------------------------------------
    # Draining

    def _check_open(self) -> None:
        if self._closed:
            raise RunnerClosed("the runner has shut down")

    async def _drain(self, drain: _Drain) -> None:
        """Fetch the job's targets in order, storing each outcome before the next starts."""
        try:
            with drain.scope:
                job: Job | None = None
                for idx, target in enumerate(drain.targets):
                    if drain.cancel_requested:
                        break
                    drain.in_flight = idx
                    result = await self._fetch_one(drain, idx, target)
                    job = await self._store_outcome(drain, idx, result)
                    drain.in_flight = None
                    if job is None or job.is_terminal:
                        break  # lapsed, finished, or cancelled while the target ran
                if drain.cancel_requested and (job is None or not job.is_terminal):
                    # Normally cancel() has marked the job; if its write failed, do it here.
                    await drain.cancel_settled.wait()
                    if drain.cancel_failed:
                        await self._finish_when_possible(drain, JobState.CANCELLED, None)
        except Exception as exc:
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
        finally:
            drain.in_flight = None
            del self._drains[drain.job_id]
            drain.stopped.set()
            drain.notify_stored()  # watchers re-read and see the job without a drain task

    async def _finish_when_possible(
        self, drain: _Drain, status: JobState, error: str | None
    ) -> None:
        """Set the job's terminal status, retrying with backoff until the database takes it.

        Cancellation (shutdown) stops the retries; the job is then reaped at shutdown or at the
        next start.
        """
        delay = RETRY_FIRST_DELAY
        while True:
            try:
                await self._access.call(
                    Store.finish_job, drain.job_id, status, error=error, now=self._now()
                )
                return
            except StoreUnavailable:
                self._log.warning(
                    "could not set the job's status; retrying",
                    exc_info=True,
                    extra={"job_id": drain.job_id, "status": str(status)},
                )
            await trio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY)

    async def _fetch_one(self, drain: _Drain, idx: int, target: Target) -> Result | _Failure:
        """Run the fetch function on one target; every way it can fail becomes a _Failure."""
        timeout = self._config.target_timeout
        # A scope of its own only when something may cut the fetch short: it costs on every
        # target.
        scope = (
            trio.CancelScope()
            if timeout is not None or self._config.cancel_grace is not None
            else contextlib.nullcontext()
        )
        with scope:
            if isinstance(scope, trio.CancelScope):
                if timeout is not None:
                    scope.deadline = trio.current_time() + timeout
                drain.fetch_scope = scope
            try:
                result = await self._fetch(target)
            except Exception as exc:
                failure = _failure_from_exception(exc)
                self._log.info(
                    "target failed",
                    extra={"job_id": drain.job_id, "idx": idx, "error": failure.error},
                )
                return failure
            finally:
                drain.fetch_scope = None
        if isinstance(scope, trio.CancelScope) and scope.cancelled_caught:
            if drain.cancel_deadline is not None and trio.current_time() >= drain.cancel_deadline:
                return _Failure(
                    "cancelled",
                    hint=f"the job was cancelled and this fetch ran past cancel_grace "
                    f"({self._config.cancel_grace:g} s)",
                )
            return _Failure(
                "timeout",
                hint=f"the fetch ran longer than target_timeout ({timeout:g} s); "
                "raise Config.target_timeout if the target is just slow",
            )
        if not isinstance(result, Result):
            return _Failure(
                f"the fetch function returned {safe_text(type(result).__name__)}, not a Result",
                hint="return trio_batch.Result(content, meta) from the fetch function",
            )
        return result

    async def _store_outcome(
        self, drain: _Drain, idx: int, result: Result | _Failure
    ) -> Job | None:
        """Store one outcome; each attempt completes even during a cancel (it cannot be cancelled).

        If the database refuses the write, it is retried with backoff for up to
        ``Config.store_retry_for`` seconds; the waits between attempts can be cancelled (at
        shutdown), the attempts themselves cannot. Raises StoreUnavailable once time is up.
        """
        success, failure = (result, None) if isinstance(result, Result) else (None, result)
        write = OutcomeWrite(
            drain.job_id,
            idx,
            result=success,
            error=failure.error if failure else None,
            hint=failure.hint if failure else None,
        )
        give_up_at = trio.current_time() + self._config.store_retry_for
        delay = RETRY_FIRST_DELAY
        while True:
            try:
                # Not cancellable (see StoreAccess.record_outcome): in effect shielded, and
                # bounded by the busy timeout.
                job = await self._access.record_outcome(
                    write, ttl=self._config.ttl, now=self._now()
                )
                break
            except StoreUnavailable:
                if trio.current_time() + delay > give_up_at:
                    raise
                self._log.warning(
                    "could not store an outcome; retrying",
                    exc_info=True,
                    extra={"job_id": drain.job_id, "idx": idx},
                )
            await trio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY)
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
    on_store_write: Callable[[str, float], None] | None = None,
) -> AsyncIterator[Runner]:
    """Start a runner on ``store``; leaving the block shuts it down.

    Only one runner may run on a database at a time: if another runner (in this process or
    another) holds it, :class:`StoreLocked` is raised at once. The claim is released when the
    block ends, and by the operating system if the process dies.

    On entry, every job the store still holds as ``queued``/``running`` (left by a process that
    died) is marked ``failed`` with error ``"restart"``; such jobs are never resumed, and their
    completed targets stay readable until their lease lapses. Lapsed jobs are purged now and
    every ``Config.purge_interval`` seconds.

    ``now`` is the wall clock used for leases (tests inject a fake one); trio's clock is used
    for everything that sleeps. ``logger`` defaults to ``logging.getLogger("trio_batch")``.
    ``on_store_write``, if given, is called on the event loop with ``(operation, seconds)``
    after each job creation (``"create_job"``) and each outcome commit (``"record_outcomes"``,
    one call per group commit): a hook for metrics; it must be quick and not raise.

    On exit (normal, by exception or by cancellation) in-flight fetches are cancelled, every
    outcome already being stored is completed, and every job still live is marked ``failed``
    with error ``"shutdown"``. An exception raised in the body comes out as itself, not wrapped
    in an exception group.
    """
    config = Config() if config is None else config
    log = logging.getLogger("trio_batch") if logger is None else logger
    lock = RunnerLock(store)
    lock.acquire()
    access = StoreAccess(store, on_write=on_store_write)
    try:
        access.start()
    except BaseException:
        lock.release()
        raise
    runner: Runner | None = None
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
            nursery.start_soon(runner._purge_periodically, name="trio_batch purge")
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
            marked_ok = False
            try:
                stopped = await access.call_on_thread(
                    Store.mark_in_flight_failed, "shutdown", now()
                )
                marked_ok = True
                if stopped:
                    log.info("live jobs marked failed at shutdown", extra={"jobs": stopped})
            except StoreUnavailable:
                # Leave them: the next start reaps them as "restart". Raising here would hide
                # whatever ended the block.
                log.error("could not mark live jobs failed at shutdown", exc_info=True)
            finally:
                if runner is not None:
                    runner._shutdown_marked_ok = marked_ok
                    runner._shutdown_marked.set()
                try:
                    access.close()
                finally:
                    lock.release()
