"""Event-loop lag under an open load: trio_batch's runner beside the least one, rate by rate.

The soak (``tests/http/test_load.py``) is a closed load: a thousand submitters retry as soon as
their backoff ends, so the loop is saturated whatever a job costs, and its lag measures that
saturation (see :mod:`benchmarks.soak_floor`). Here jobs arrive at a fixed rate, Poisson
arrivals at their own times whatever the runner answers, each from one of 200 callers with 1 to
4 targets fetched as the soak fetches them (0-4 ms each, 1 in 20 failing); a refused arrival is
dropped and counted (a client giving up on a 429), an accepted one waits for its job. A 1 ms
heartbeat records how late it wakes. At a rate the loop can take, the lag is what passes of
the runner's work hold, not a queue of work waiting for the loop, and the time the loop slept
past a beat's due time (epoll's whole milliseconds, :mod:`benchmarks.loop_lag`), printed
apart.

``python -m benchmarks.open_load [--rates 100,300,500] [--seconds 5] [--rounds 2] [--profile]``
prints, per rate and runner, the lag's p50, p99 and max (and its p99 and max less the idle
sleep), the share of the run the loop's thread spent on a CPU, and the arrivals accepted and
refused. The runners alternate within each round; nothing here is a threshold.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from trio_batch import Busy, CallerBusy, Config, Result, Store, Target, open_runner

from .loop_lag import IdleWaits, slept_past_due
from .soak_floor import open_least_runner
from .soak_profile import LoopProfile

__all__ = ["Figures", "measure"]

CALLERS = 200
RUNNERS = ("trio_batch", "least")


@dataclass
class Figures:
    """One run's figures."""

    lags: list[float] = field(default_factory=list)  # ms
    #: Each beat's lag less the loop's idle sleep after it was due (ms): what tasks held.
    held: list[float] = field(default_factory=list)
    accepted: int = 0
    refused: int = 0
    busy: float = 0.0  # the loop thread's CPU time over the run's length

    def line(self, rate: float, runner: str) -> str:
        """The run as one printed line."""
        return (
            f"{rate:6.0f}/s  {runner:<10}  lag p50 {statistics.median(self.lags or [0]):5.2f} "
            f"ms, p99 {_p99(self.lags):5.2f} ms, max {max(self.lags, default=0):6.2f} ms; less "
            f"the idle sleep: p99 {_p99(self.held):5.2f} ms, max {max(self.held, default=0):6.2f}"
            f" ms; loop busy {100 * self.busy:3.0f}%; {self.accepted} accepted, "
            f"{self.refused} refused"
        )


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


class _Flaky(Exception):
    """A fetch failure now and then, as the soak's."""


def _opener(runner: str, store: Store, fetch: Any) -> AbstractAsyncContextManager[Any]:
    if runner == "least":
        return open_least_runner(store, fetch, Config(), paced=True)
    return open_runner(store, fetch, Config())


@asynccontextmanager
async def _heartbeat(figures: Figures) -> AsyncIterator[None]:
    beats: list[tuple[float, float]] = []  # (due, woke), perf_counter()
    idle = IdleWaits()

    async def heartbeat() -> None:  # named as soak_profile.LoopProfile knows it
        while True:
            due = trio.current_time() + 0.001
            await trio.sleep(0.001)
            lag = trio.current_time() - due
            woke = time.perf_counter()
            figures.lags.append(1000 * lag)
            beats.append((woke - lag, woke))

    trio.lowlevel.add_instrument(idle)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(heartbeat)
            yield
            nursery.cancel_scope.cancel()
    finally:
        trio.lowlevel.remove_instrument(idle)
    slept = slept_past_due(beats, idle.waits)
    figures.held = [lag - 1000 * past for lag, past in zip(figures.lags, slept, strict=True)]


async def _run(
    path: Path, runner_name: str, rate: float, seconds: float, seed: int, profile: bool
) -> Figures:
    # The arrivals' own generator: the same times for both runners, whatever the fetches draw.
    arrivals, rng, figures = random.Random(seed), random.Random(-seed), Figures()

    async def fetch(target: Target) -> Result:
        await trio.sleep(rng.uniform(0, 0.004))
        if rng.random() < 0.05:
            raise _Flaky(target.url)
        return Result(f"content of {target.url}", {"url": target.url})

    async def submitter(runner: Any, n: int) -> None:  # named as LoopProfile knows it
        targets = [Target(f"https://open.test/{n}/{k}") for k in range(rng.randint(1, 4))]
        try:
            job_id, _ = await runner.submit(f"caller{rng.randrange(CALLERS)}", "user", targets)
        except (Busy, CallerBusy):
            figures.refused += 1
            return
        figures.accepted += 1
        await runner.wait(job_id)

    with Store.open(path) as store:
        async with (
            _opener(runner_name, store, fetch) as runner,
            _heartbeat(figures),
            trio.open_nursery() as jobs,
        ):
            profiler = LoopProfile() if profile else None
            if profiler is not None:
                trio.lowlevel.add_instrument(profiler)
            began, cpu_began = trio.current_time(), time.thread_time()
            due, n = began, 0
            while due < began + seconds:
                due += arrivals.expovariate(rate)
                await trio.sleep_until(due)  # late, it fires at once: the arrivals catch up
                jobs.start_soon(submitter, runner, n)
                n += 1
            figures.busy = (time.thread_time() - cpu_began) / (trio.current_time() - began)
            if profiler is not None:
                trio.lowlevel.remove_instrument(profiler)
                profiler.report()
    return figures


def measure(
    runner: str, rate: float, *, seconds: float, seed: int = 1, profile: bool = False
) -> Figures:
    """One run of ``runner`` (``"trio_batch"`` or ``"least"``) at ``rate`` jobs a second,
    on a fresh database, the heap collected and frozen first as ``trio-batch serve`` does.
    ``profile``: print a :class:`~benchmarks.soak_profile.LoopProfile` of the arrivals."""
    with tempfile.TemporaryDirectory() as tmp:
        gc.collect()
        gc.freeze()
        try:
            return trio.run(_run, Path(tmp) / "open.db", runner, rate, seconds, seed, profile)
        finally:
            gc.unfreeze()


def main() -> None:
    """Print the figures of each rate, the runners alternated in each round."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="100,300,500", help="jobs a second, comma-separated")
    parser.add_argument("--seconds", type=float, default=5.0, help="each run's arrivals (s)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="print where the loop's time went")
    args = parser.parse_args()
    for round_ in range(args.rounds):
        order = RUNNERS if round_ % 2 == 0 else RUNNERS[::-1]
        for rate in (float(r) for r in args.rates.split(",")):
            for runner in order:
                figures = measure(
                    runner, rate, seconds=args.seconds, seed=round_ + 1, profile=args.profile
                )
                print(figures.line(rate, runner), flush=True)


if __name__ == "__main__":
    main()
