"""trio_batch under load: serial and concurrent drains, latencies, and event-loop health.

Every function here opens its own :class:`trio_batch.Store` on a file database (the serial
and concurrent ones also a PostgreSQL store, given a URL: :mod:`benchmarks.postgres`), runs one
``trio.run`` with :func:`trio_batch.open_runner` and a no-op fetch, and returns raw samples;
:mod:`benchmarks.run` turns them into medians and ratios.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field

import trio

from trio_batch import (
    Config,
    JobState,
    JobStore,
    Result,
    Runner,
    Store,
    Target,
    open_runner,
    open_store,
    otel_tracing,
)
from trio_batch._tracing import NO_TRACING, Tracing

#: The lock holder: a second process that takes SQLite's write lock and keeps it for a while.
LOCK_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=30.0, isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
print("released", flush=True)
"""


def open_db(path: str) -> Store | JobStore:
    """The store at ``path``: a file database, or a shared one at a ``postgresql://`` URL."""
    return open_store(path) if path.startswith("postgresql://") else Store.open(path)


def close_db(store: Store | JobStore) -> None:
    """Close what :func:`open_db` opened, outside any trio run."""
    if isinstance(store, Store):
        store.close()
    else:
        trio.run(store.aclose)  # its store thread answers calls from any trio run


async def noop_fetch(target: Target) -> Result:
    """The benchmark's fetch: no I/O, an empty result."""
    return Result("")


def job_targets(tag: str, n: int) -> list[Target]:
    """``n`` distinct targets; ``tag`` keeps jobs distinct so none is reused by idempotency."""
    return [Target(f"https://bench.test/{tag}/{i}") for i in range(n)]


@dataclass
class Heartbeat:
    """A task that sleeps ``interval`` in a loop and records how late each wake-up is."""

    interval: float = 0.001
    #: (wake-up time on trio's clock, lateness in seconds) per beat.
    samples: list[tuple[float, float]] = field(default_factory=list)

    async def run(self) -> None:
        while True:
            deadline = trio.current_time() + self.interval
            await trio.sleep_until(deadline)
            now = trio.current_time()
            self.samples.append((now, now - deadline))

    def lateness(self, start: float = float("-inf"), end: float = float("inf")) -> list[float]:
        """Lateness of the beats that woke between ``start`` and ``end``."""
        return [late for when, late in self.samples if start <= when <= end]


async def run_job(runner: Runner, caller: str, targets: list[Target]) -> JobState:
    job_id, reused = await runner.submit(caller, "bench", targets)
    assert not reused, "a benchmark job must be new"
    job = await runner.wait(job_id)
    assert job is not None
    return job.status


def check_done(statuses: list[JobState]) -> None:
    bad = [s for s in statuses if s is not JobState.DONE]
    if bad:
        raise RuntimeError(f"{len(bad)} of {len(statuses)} benchmark jobs did not finish: {bad[0]}")


# ---------------------------------------------------------------------------------------------
# Throughput


async def _settle(runner: Runner, settle: bool) -> None:
    """With ``settle``, finish the purge of lapsed jobs the runner starts on open."""
    if settle:
        await runner.purge_expired()


def measure_serial(
    path: str,
    *,
    jobs: int,
    targets_per_job: int = 32,
    tag: str = "s",
    settle: bool = False,
    tracing: Tracing = NO_TRACING,
) -> float:
    """Targets/s of ``jobs`` jobs run one after another (submit, then wait) by one caller.

    The runner purges lapsed jobs in the background from the moment it opens; with ``settle``
    that purge is finished (untimed) before the clock starts. ``tracing`` goes to the runner.
    """
    batches = [job_targets(f"{tag}/{j}", targets_per_job) for j in range(jobs)]
    store = open_db(path)

    async def main() -> float:
        async with open_runner(store, noop_fetch, tracing=tracing) as runner:
            await _settle(runner, settle)
            statuses = []
            start = time.perf_counter()
            for targets in batches:
                statuses.append(await run_job(runner, "serial", targets))
            elapsed = time.perf_counter() - start
        check_done(statuses)
        return elapsed

    try:
        elapsed = trio.run(main)
    finally:
        close_db(store)
    return jobs * targets_per_job / elapsed


def measure_cycle(
    path: str, *, callers: int, jobs_per_caller: int, targets_per_job: int = 32, tag: str = "y"
) -> float:
    """Targets/s of the loop an embedding program runs: each of ``callers`` callers builds a
    job's targets, submits it, waits for it with ``runner.wait``, then goes on to the next.

    Unlike :func:`measure_serial` and :func:`measure_concurrent` the targets are built inside
    the timed loop (their checks are the library's cost too), as :mod:`benchmarks.minimal`
    builds its URLs inside its own.
    """
    store = open_db(path)

    async def main() -> float:
        statuses: list[JobState] = []

        async def caller(c: int) -> None:
            for j in range(jobs_per_caller):
                targets = job_targets(f"{tag}/{c}/{j}", targets_per_job)
                statuses.append(await run_job(runner, f"caller{c}", targets))

        async with open_runner(store, noop_fetch) as runner:
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for c in range(callers):
                    nursery.start_soon(caller, c)
            elapsed = time.perf_counter() - start
        check_done(statuses)
        return elapsed

    try:
        elapsed = trio.run(main)
    finally:
        close_db(store)
    return callers * jobs_per_caller * targets_per_job / elapsed


@dataclass(frozen=True, slots=True)
class Concurrent:
    """Aggregate throughput of concurrent callers, and the heartbeat's lateness beside it."""

    targets_per_s: float
    lateness: list[float]


def measure_concurrent(
    path: str,
    *,
    jobs_per_caller: int,
    targets_per_job: int = 32,
    callers: int | None = None,
    heartbeat: bool = False,
    tag: str = "c",
) -> Concurrent:
    """``callers`` (default ``jobs_total``) distinct callers, each running ``jobs_per_caller``
    jobs back to back, so that ``callers`` jobs are live at once. With ``heartbeat``, a 1 ms
    heartbeat task runs beside them.
    """
    n_callers = Config().jobs_total if callers is None else callers
    batches = [
        [job_targets(f"{tag}/{c}/{j}", targets_per_job) for j in range(jobs_per_caller)]
        for c in range(n_callers)
    ]
    store = open_db(path)
    beat = Heartbeat()

    async def main() -> float:
        statuses: list[JobState] = []

        async def caller(c: int) -> None:
            for targets in batches[c]:
                statuses.append(await run_job(runner, f"caller{c}", targets))

        async with open_runner(store, noop_fetch) as runner, trio.open_nursery() as outer:
            if heartbeat:
                outer.start_soon(beat.run)
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for c in range(n_callers):
                    nursery.start_soon(caller, c)
            elapsed = time.perf_counter() - start
            outer.cancel_scope.cancel()
        check_done(statuses)
        return elapsed

    try:
        elapsed = trio.run(main)
    finally:
        close_db(store)
    total = n_callers * jobs_per_caller * targets_per_job
    return Concurrent(total / elapsed, beat.lateness())


def measure_idle_heartbeat(path: str, *, seconds: float) -> list[float]:
    """The heartbeat's lateness beside an idle runner: the loop's own noise floor."""
    store = Store.open(path)
    beat = Heartbeat()

    async def main() -> None:
        async with open_runner(store, noop_fetch), trio.open_nursery() as nursery:
            nursery.start_soon(beat.run)
            await trio.sleep(seconds)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        store.close()
    return beat.lateness()


# ---------------------------------------------------------------------------------------------
# Latency


@dataclass(frozen=True, slots=True)
class Latency:
    """Seconds per ``Runner.submit`` and per ``Runner.status`` call."""

    submit: list[float]
    status: list[float]


def measure_latency(
    path: str,
    *,
    samples: int,
    targets_per_job: int = 32,
    warmup: int = 3,
    tag: str = "l",
    settle: bool = False,
) -> Latency:
    """Time ``samples`` submits of a ``targets_per_job``-target job on an idle runner (each job
    is drained, untimed, before the next submit), then ``samples`` status reads of a finished
    job of that size. ``settle`` as for :func:`measure_serial`.
    """
    batches = [job_targets(f"{tag}/{j}", targets_per_job) for j in range(warmup + samples)]
    store = Store.open(path)

    async def main() -> Latency:
        submit: list[float] = []
        status: list[float] = []
        async with open_runner(store, noop_fetch) as runner:
            await _settle(runner, settle)
            job_id = ""
            for j, targets in enumerate(batches):
                start = time.perf_counter()
                job_id, _ = await runner.submit(f"latency{j}", "bench", targets)
                elapsed = time.perf_counter() - start
                if j >= warmup:
                    submit.append(elapsed)
                job = await runner.wait(job_id)
                assert job is not None and job.status is JobState.DONE
            for j in range(warmup + samples):
                start = time.perf_counter()
                got = await runner.status(job_id)
                elapsed = time.perf_counter() - start
                assert got is not None and len(got[1]) == targets_per_job
                if j >= warmup:
                    status.append(elapsed)
        return Latency(submit, status)

    try:
        return trio.run(main)
    finally:
        store.close()


# ---------------------------------------------------------------------------------------------
# A second process holding the write lock


@dataclass(frozen=True, slots=True)
class UnderLock:
    """The heartbeat beside concurrent jobs while another process held the write lock."""

    lateness: list[float]  # every beat of the run
    lateness_held: list[float]  # the beats while the lock was held
    held_seconds: float  # how long the lock was held, as seen from here
    targets_during_hold: int  # targets whose jobs finished while the lock was held
    jobs: int  # jobs run in all (each must end ``done``)
    #: (seconds since the lock was taken, lateness) of every beat more than 1 ms late.
    spikes: list[tuple[float, float]] = field(default_factory=list)


def measure_under_lock(
    path: str,
    *,
    hold_seconds: float,
    targets_per_job: int = 32,
    callers: int | None = None,
    settle_seconds: float = 0.3,
    tag: str = "k",
) -> UnderLock:
    """Run ``callers`` concurrent callers with a 1 ms heartbeat; after ``settle_seconds`` a
    second process takes the write lock (``BEGIN IMMEDIATE``) and holds it ``hold_seconds``;
    the callers stop ``settle_seconds`` after it lets go. Every job must still end ``done``.
    """
    n_callers = Config().jobs_total if callers is None else callers
    store = Store.open(path)
    beat = Heartbeat()
    command = [sys.executable, "-c", LOCK_HOLDER, path, str(hold_seconds)]

    async def main() -> UnderLock:
        statuses: list[JobState] = []
        finished: list[tuple[float, int]] = []
        stop = trio.Event()

        async def caller(c: int) -> None:
            j = 0
            while not stop.is_set():
                status = await run_job(
                    runner, f"caller{c}", job_targets(f"{tag}/{c}/{j}", targets_per_job)
                )
                statuses.append(status)
                finished.append((trio.current_time(), targets_per_job))
                j += 1

        async with open_runner(store, noop_fetch) as runner, trio.open_nursery() as outer:
            outer.start_soon(beat.run)
            async with trio.open_nursery() as nursery:
                for c in range(n_callers):
                    nursery.start_soon(caller, c)
                await trio.sleep(settle_seconds)
                process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE)
                assert process.stdout is not None
                got = b""
                while b"locked" not in got:
                    chunk = await process.stdout.receive_some()
                    if not chunk:
                        raise RuntimeError("the lock holder exited without taking the lock")
                    got += chunk
                locked_at = trio.current_time()
                await process.wait()
                released_at = trio.current_time()
                if process.returncode != 0:
                    raise RuntimeError(f"the lock holder failed with {process.returncode}")
                await trio.sleep(settle_seconds)
                stop.set()
            outer.cancel_scope.cancel()
        check_done(statuses)
        return UnderLock(
            lateness=beat.lateness(),
            lateness_held=beat.lateness(locked_at, released_at),
            held_seconds=released_at - locked_at,
            targets_during_hold=sum(n for t, n in finished if locked_at < t < released_at),
            jobs=len(statuses),
            spikes=[(when - locked_at, late) for when, late in beat.samples if late > 0.001],
        )

    try:
        return trio.run(main)
    finally:
        store.close()


def sdk_tracing(*, store_spans: bool = True) -> Tracing | None:
    """OpenTelemetry tracing as ``serve --otel`` sets it up (the SDK, a batch span processor)
    with an exporter that drops the spans, so the figure is the tracing's cost, not the
    network's; None without the SDK."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError:
        return None

    class Drop(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    return otel_tracing(provider, store_spans=store_spans)
