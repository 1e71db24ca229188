"""Load: hundreds of concurrent submitters against the default caps, on the real clock.

Hundreds of tasks, spread over many callers, each submit a few jobs (backing off on
``CallerBusy``/``Busy``), then wait for them; some cancel their job, poll its status, poll or
cancel other callers' jobs, or resubmit the same targets (an idempotent reuse). Meanwhile:

- a sampler reads the live counts from its own connection to the database and records any
  moment at which live jobs exceed a cap (per caller or in total);
- a heartbeat task sleeps 1 ms in a loop and records how late it wakes up (event-loop lag).

Checked: no cap is ever exceeded, every accepted job reaches a terminal status with its stored
outcomes matching its counts and its status the one they imply (or ``cancelled``), every
result the fetch returned (or error it raised) reached the store, nothing is left live, the
database is intact, and the whole run ends (no deadlock; pytest-timeout guards a hang).
Printed: jobs/s, the p50/p99/max lag, the loop thread's CPU time (beside the run's length: how
near saturation the loop is) and each generation's garbage collections (the heap is frozen
first, as ``trio-batch serve`` does). Nothing is asserted about speed.
``TRIO_BATCH_SOAK=1`` runs a bigger load.
"""

from __future__ import annotations

import gc
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from benchmarks.loop_lag import IdleWaits, slept_past_due
from trio_batch import (
    Busy,
    CallerBusy,
    Config,
    Result,
    Runner,
    Store,
    Target,
    TargetState,
    open_runner,
)

from ..support.figures import SOAK, Figures, scaled
from ..support.invariants import status_mismatch

# hundreds of submitters against a real service: left out of make test-fast.
pytestmark = pytest.mark.slow

SEED = 4242
SUBMITTERS = scaled(300, 1000)
CALLERS = scaled(60, 200)
JOBS_EACH = scaled(2, 5)
#: A refused submitter retries after a random wait of up to ``backoff`` (full jitter), which
#: doubles from FIRST_BACKOFF to MAX_BACKOFF, as an HTTP client honouring 429 would. (With a
#: short cap, a thousand submitters retrying flat out starve the event loop: the drains then
#: crawl, which measures the test's thundering herd rather than the runner.)
FIRST_BACKOFF = 0.002
MAX_BACKOFF = 1.0


class Flaky(Exception):
    """A fetch failure now and then."""


@dataclass
class Load:
    runner: Runner
    rng: random.Random
    accepted: list[str] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    beats: list[float] = field(default_factory=list)  # when each beat was due
    woke: list[float] = field(default_factory=list)  # perf_counter() as each beat woke
    #: Seconds the loop's thread waited for a CPU during each beat (None: not known here).
    cpu_waits: list[float] | None = field(default_factory=list)
    samples: int = 0
    peak_live: int = 0
    fetching: int = 0
    peak_fetching: int = 0
    #: URLs whose fetch returned a result or raised: each outcome must reach the store.
    fetched: set[str] = field(default_factory=set)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


async def submitter(load: Load, index: int) -> None:
    runner, rng = load.runner, load.rng
    caller = f"caller{index % CALLERS}"
    for n in range(JOBS_EACH):
        targets = [Target(f"https://load.test/{index}/{n}/{k}") for k in range(rng.randint(1, 4))]
        backoff = FIRST_BACKOFF
        while True:
            try:
                job_id, reused = await runner.submit(caller, "user", targets)
            except (CallerBusy, Busy) as exc:
                load.events[f"refused ({type(exc).__name__})"] += 1
                await trio.sleep(rng.uniform(0, backoff))
                backoff = min(2 * backoff, MAX_BACKOFF)
                continue
            break
        if reused:
            load.violations.append(f"fresh targets of {caller} were reused as job {job_id}")
        load.accepted.append(job_id)
        roll = rng.random()
        if roll < 0.2:
            await trio.sleep(rng.uniform(0, 0.004))
            load.events[f"cancel -> {await runner.cancel(job_id)}"] += 1
        elif roll < 0.5:
            for _ in range(rng.randint(1, 4)):
                status = await runner.status(job_id)
                load.events["status polls"] += 1
                if status is None:
                    load.violations.append(f"job {job_id} vanished while polled")
                await trio.sleep(rng.uniform(0, 0.003))
        if rng.random() < 0.1 and load.accepted:
            other = rng.choice(load.accepted)
            if rng.random() < 0.5:
                load.events[f"cancel other -> {await runner.cancel(other)}"] += 1
            else:
                await runner.status(other)
                load.events["status polls"] += 1
        job = await runner.wait(job_id)
        if job is None or not job.is_terminal:
            load.violations.append(f"job {job_id} ended the wait as {job}")
            continue
        load.events[f"ended {job.status}"] += 1
        if rng.random() < 0.1:  # the same targets again, within the lease: the same job
            again = await runner.submit(caller, "user", targets)
            load.events["resubmitted"] += 1
            if again != (job_id, True):
                load.violations.append(f"resubmitting {job_id} gave {again}")


async def sampler(load: Load, reader: Store, config: Config) -> None:
    """Prove the caps from outside the runner: its own connection, committed state only."""
    conn = reader.db.conn
    while True:
        rows = conn.execute(
            "SELECT caller, count(*) FROM jobs WHERE status IN ('queued', 'running') "
            "GROUP BY caller"
        ).fetchall()
        total = sum(count for _, count in rows)
        worst = max((count for _, count in rows), default=0)
        load.samples += 1
        load.peak_live = max(load.peak_live, total)
        if total > config.jobs_total or worst > config.jobs_per_caller:
            load.violations.append(f"live jobs over a cap: {total} in all, {worst} for one")
        await trio.sleep(0.002)


async def heartbeat(load: Load) -> None:
    with cpu_waits() as waited:
        if waited is None:
            load.cpu_waits = None
        while True:
            expected = trio.current_time() + 0.001
            before = 0.0 if waited is None else waited()
            await trio.sleep(0.001)
            load.lags.append(trio.current_time() - expected)
            load.beats.append(expected)
            load.woke.append(time.perf_counter())
            if waited is not None and load.cpu_waits is not None:
                load.cpu_waits.append(waited() - before)


@contextmanager
def cpu_waits() -> Iterator[Callable[[], float] | None]:
    """A clock of the seconds this thread spent runnable but waiting for a CPU (Linux's
    ``schedstat``), or None where there is none. On a shared machine other processes take
    the loop's CPU: a beat that waited that long was late for them, not for the runner."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        yield None
        return
    try:
        yield lambda: int(os.pread(fd, 128, 0).split()[1]) / 1e9
    finally:
        os.close(fd)


#: A collection by Python's cyclic garbage collector: (began, ended, generation), perf_counter().
Pause = tuple[float, float, int]


@contextmanager
def collector_pauses() -> Iterator[list[Pause]]:
    """Every collection while the block runs: the collector stops every thread, the loop's
    too, so a beat whose wait holds one was late for the host's heap, not the runner's work."""
    pauses: list[Pause] = []
    began = 0.0

    def observe(phase: str, info: dict[str, int]) -> None:
        nonlocal began
        if phase == "start":
            began = time.perf_counter()
        else:
            pauses.append((began, time.perf_counter(), info["generation"]))

    gc.callbacks.append(observe)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(observe)


def _beside_no_collection(load: Load, pauses: list[Pause]) -> list[float]:
    """The lags (ms) of the beats whose wait (from due to woken) held no collection."""
    lags = []
    for lag, woke in zip(load.lags, load.woke, strict=True):
        due = woke - lag
        if not any(began < woke and ended > due for began, ended, _ in pauses):
            lags.append(1000 * lag)
    return lags


def _collections(pauses: list[Pause]) -> str:
    """Each generation's collections: how many, the longest and all together (ms)."""
    parts = []
    for generation in (0, 1, 2):
        took = [1000 * (ended - began) for began, ended, g in pauses if g == generation]
        parts.append(
            f"gen{generation} {len(took)}, longest {max(took, default=0):.1f} ms, "
            f"{sum(took):.0f} ms in all"
        )
    return "; ".join(parts)


@pytest.mark.timeout(900 if SOAK else 300)
async def test_hundreds_of_submitters_under_the_default_caps(
    tmp_path: Path, figures: Figures
) -> None:
    # Collect what earlier suites in this process left behind (Hypothesis' examples, above
    # all), and freeze the rest, as `trio-batch serve` does once up: a full collection of
    # pytest's heap during the run (50-110 ms) would measure the host process, not the runner.
    with frozen_heap():
        await _run_the_load(tmp_path, figures)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """The heap collected and frozen (:func:`gc.freeze`) for the block, then thawed."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def _run_the_load(tmp_path: Path, figures: Figures) -> None:
    path = tmp_path / "load.db"
    config = Config()  # the defaults: 1 live job per caller, 8 in all
    rng = random.Random(SEED)

    async def fetch(target: Target) -> Result:
        load.fetching += 1
        load.peak_fetching = max(load.peak_fetching, load.fetching)
        try:
            await trio.sleep(rng.uniform(0, 0.004))
            load.fetched.add(target.url)  # nothing can cancel the fetch from here on
            if rng.random() < 0.05:
                raise Flaky(f"flaky {target.url}")
            return Result(f"content of {target.url}", {"url": target.url})
        finally:
            load.fetching -= 1

    with Store.open(path) as store, Store.open(path) as reader:
        async with open_runner(store, fetch, config) as runner:
            load = Load(runner, rng)
            idle = IdleWaits()
            trio.lowlevel.add_instrument(idle)
            with collector_pauses() as pauses:
                async with trio.open_nursery() as monitors:
                    monitors.start_soon(sampler, load, reader, config)
                    monitors.start_soon(heartbeat, load)
                    started = trio.current_time()
                    cpu_began = time.thread_time()  # this thread runs the loop
                    async with trio.open_nursery() as work:
                        for index in range(SUBMITTERS):
                            work.start_soon(submitter, load, index)
                    elapsed = trio.current_time() - started
                    loop_cpu = time.thread_time() - cpu_began
                    monitors.cancel_scope.cancel()
            trio.lowlevel.remove_instrument(idle)

            # Every accepted job is terminal, and its counts and status match its outcomes.
            stored: set[str] = set()
            for job_id in load.accepted:
                status = await runner.status(job_id)
                if status is None:
                    load.violations.append(f"job {job_id} is gone")
                    continue
                job, targets = status
                outcomes = [
                    t for t in targets if t.status in (TargetState.DONE, TargetState.FAILED)
                ]
                if job.status.is_live or job.targets_done != len(outcomes):
                    load.violations.append(f"job {job_id}: {job.status}, {job.targets_done} done")
                failed = sum(t.status is TargetState.FAILED for t in outcomes)
                if job.targets_failed != failed:
                    load.violations.append(f"job {job_id}: {job.targets_failed} failed counted")
                mismatch = status_mismatch(
                    job.status, job.error, job.targets_total, len(outcomes), failed
                )
                if mismatch:
                    load.violations.append(f"job {job_id} {mismatch}")
                stored.update(t.url for t in outcomes)
            unstored = load.fetched - stored
            if unstored:
                load.violations.append(f"{len(unstored)} fetch results never stored")
            live = store.count_live_jobs()
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    distinct = len(set(load.accepted))
    lag_ms = [1000 * lag for lag in load.lags]
    # Every submitter's first submit lands in the same scheduler batch: the start is a burst.
    settled = [ms for ms, due in zip(lag_ms, load.beats, strict=True) if due >= started + 1.0]
    events = ", ".join(f"{name} {n}" for name, n in sorted(load.events.items()))
    figures.add(
        f"load: {SUBMITTERS} submitters, {CALLERS} callers, {distinct} jobs in {elapsed:.1f} s "
        f"= {distinct / elapsed:.0f} jobs/s; event-loop lag p50 {_percentile(lag_ms, 0.5):.2f} "
        f"ms, p99 {_percentile(lag_ms, 0.99):.2f} ms, max {max(lag_ms, default=0):.2f} ms "
        f"({len(lag_ms)} beats; after the first second: p99 {_percentile(settled, 0.99):.2f} "
        f"ms, max {max(settled, default=0):.2f} ms); the loop's thread {loop_cpu:.2f} s on a "
        f"CPU, {1000 * loop_cpu / max(distinct, 1):.2f} ms a job"
    )
    quiet = _beside_no_collection(load, pauses)
    figures.add(
        f"load: collections {_collections(pauses)}; the {len(quiet)} beats beside none: lag "
        f"p99 {_percentile(quiet, 0.99):.2f} ms, max {max(quiet, default=0):.2f} ms"
    )
    # Each beat's lag less the time the loop slept after the beat was due: what tasks held it.
    beats = [(woke - lag, woke) for lag, woke in zip(load.lags, load.woke, strict=True)]
    slept = slept_past_due(beats, idle.waits)
    held = [ms - 1000 * past for ms, past in zip(lag_ms, slept, strict=True)]
    figures.add(
        f"load: each beat's lag less the loop's idle sleep past its due time (epoll's whole "
        f"ms): p99 {_percentile(held, 0.99):.2f} ms, max {max(held, default=0):.2f} ms"
    )
    if load.cpu_waits is not None:
        # Each beat's lag less the time the loop's thread waited for a CPU meanwhile.
        own = [ms - 1000 * w for ms, w in zip(lag_ms, load.cpu_waits, strict=True)]
        figures.add(
            f"load: the loop's thread waited {sum(load.cpu_waits):.2f} s for a CPU (other "
            f"processes, or this one's threads); each beat's lag less its wait: p99 "
            f"{_percentile(own, 0.99):.2f} ms, max {max(own, default=0):.2f} ms"
        )
    figures.add(
        f"load: {load.samples} cap samples, peak {load.peak_live} live jobs "
        f"(cap {config.jobs_total}), peak {load.peak_fetching} fetches in flight; {events}"
    )
    assert live == 0
    assert distinct == len(load.accepted)
    assert load.violations == [], "\n".join(load.violations[:30])
