"""Event-loop lag under an open load: ``python -m benchmarks.open_load [--rates 100,300]
[--seconds 5] [--rounds 2]``.

Jobs arrive at a fixed rate, Poisson arrivals at their own times whatever the runner answers,
each from one of 200 callers with 1 to 4 targets (fetches of 0-4 ms, 1 in 20 failing); a
refused arrival is dropped and counted (a client giving up on a 429), an accepted one waits for
its job. A 1 ms heartbeat records how late it wakes. Part of that lateness is the loop's own
idle sleep past the beat's due time (epoll's whole milliseconds, :mod:`benchmarks.loop_lag`),
there with no task holding the loop; the rest is what the runner's work held it for. Printed
per rate: the lag's p50, p99 and max, its p99 and max less the idle sleep (the goal: a p99
under 1 ms), the share of the run the loop's thread spent on a CPU, and the arrivals accepted
and refused.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trio

from trio_batch import Busy, CallerBusy, Config, Result, Runner, Store, Target, open_runner

from .loop_lag import IdleWaits, slept_past_due
from .stats import machine

__all__ = ["Figures", "measure"]

CALLERS = 200


@dataclass
class Figures:
    """One run's figures."""

    lags: list[float] = field(default_factory=list)  # ms
    #: Each beat's lag less the loop's idle sleep after it was due (ms): what tasks held.
    held: list[float] = field(default_factory=list)
    accepted: int = 0
    refused: int = 0
    busy: float = 0.0  # the loop thread's CPU time over the run's length

    def line(self, rate: float) -> str:
        """The run as one printed line."""
        return (
            f"{rate:6.0f}/s  lag p50 {statistics.median(self.lags or [0]):5.2f} "
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


@asynccontextmanager
async def _heartbeat(figures: Figures) -> AsyncIterator[None]:
    beats: list[tuple[float, float]] = []  # (due, woke), perf_counter()
    idle = IdleWaits()

    async def heartbeat() -> None:
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


async def _run(path: Path, rate: float, seconds: float, seed: int) -> Figures:
    # The arrivals' own generator: the same times in every run, whatever the fetches draw.
    arrivals, rng, figures = random.Random(seed), random.Random(-seed), Figures()

    async def fetch(target: Target) -> Result:
        await trio.sleep(rng.uniform(0, 0.004))
        if rng.random() < 0.05:
            raise _Flaky(target.url)
        return Result(f"content of {target.url}", {"url": target.url})

    async def submitter(runner: Runner, n: int) -> None:
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
            open_runner(store, fetch, Config()) as runner,
            _heartbeat(figures),
            trio.open_nursery() as jobs,
        ):
            began, cpu_began = trio.current_time(), time.thread_time()
            due, n = began, 0
            while due < began + seconds:
                due += arrivals.expovariate(rate)
                await trio.sleep_until(due)  # late, it fires at once: the arrivals catch up
                jobs.start_soon(submitter, runner, n)
                n += 1
            figures.busy = (time.thread_time() - cpu_began) / (trio.current_time() - began)
    return figures


def measure(rate: float, *, seconds: float, seed: int = 1) -> Figures:
    """One run at ``rate`` jobs a second on a fresh database, the heap collected and frozen
    first as ``trio-batch serve`` does."""
    with tempfile.TemporaryDirectory() as tmp:
        gc.collect()
        gc.freeze()
        try:
            return trio.run(_run, Path(tmp) / "open.db", rate, seconds, seed)
        finally:
            gc.unfreeze()


def main(argv: list[str] | None = None) -> None:
    """Print the figures of each rate, round by round, with the machine they ran on."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.open_load", description=__doc__)
    parser.add_argument("--rates", default="100,300", help="jobs a second, comma-separated")
    parser.add_argument("--seconds", type=float, default=5.0, help="each run's arrivals (s)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"Loop lag under an open load\n{machine()}")
    for round_ in range(args.rounds):
        for rate in (float(r) for r in args.rates.split(",")):
            print(measure(rate, seconds=args.seconds, seed=round_ + 1).line(rate), flush=True)


if __name__ == "__main__":
    main()
