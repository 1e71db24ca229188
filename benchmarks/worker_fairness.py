"""A quiet caller beside busy ones: ``python -m benchmarks.worker_fairness [--quick]``.

The processing workers' fairness, measured end to end with the default ``HttpFetcher``
(``process_workers``: the cores plus two) on a SQLite file, targets read from ``file://``
(no server, no per-host limit in the way). Per round, in the same run:

- **alone**: one caller's one-target grep job, from submit to its end, on an idle pool that
  has run one target before (a warm worker);
- **beside**: the same job, submitted once two other callers' 8 hostile jobs (4 each, one
  catastrophic grep apiece, stopped only by ``process_timeout``, 20 s) hold every worker of
  the pool and burn (each worker process has used 1 s of CPU: read from /proc, Linux only);
  the hostile jobs are abandoned at the end of the round.

Figures are seconds, medians over the rounds, and the ratio beside/alone within a round. The
hostile processing burns every core, so "beside" also pays the operating system's sharing of
the cores and, when no worker is idle, a worker process's start.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from trio_batch import Config, JobState, Options, Runner, Store, Target, open_runner
from trio_batch.fetchers import HttpFetcher

from .stats import machine, ratio

HOSTILE_CALLERS = ("mallory", "trudy")
HOSTILE_JOBS = 8
#: Exponential backtracking on a line without a Z: it never ends before the deadline.
CATASTROPHIC_GREP = "(.+)+Z"
#: Seconds of CPU after which a worker is taken to burn on a hostile pattern (a start and
#: its imports take about half).
BURNT = 1.0


async def _quick(runner: Runner, text: Path) -> float:
    """Seconds from submit to the end of carol's one-target grep job on ``text`` (a new file
    each time: an identical submit would return the job before)."""
    start = time.perf_counter()
    job_id, _ = await runner.submit("carol", "user", [Target(text.as_uri(), Options(grep="b"))])
    job = await runner.wait(job_id)
    assert job is not None and job.status is JobState.DONE, job
    return time.perf_counter() - start


def _burning_children() -> int:
    """Child processes of this one that have used :data:`BURNT` seconds of CPU or more."""
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    burning = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone
            continue
        ppid, cpu = int(fields[1]), int(fields[11]) + int(fields[12])
        burning += ppid == me and cpu / tick >= BURNT
    return burning


async def _all_workers_burning(fetcher: HttpFetcher) -> None:
    """Wait until the pool's ``workers`` worker processes burn (a script: polled), for at
    most three quarters of the processing deadline."""
    with trio.fail_after(fetcher.process_timeout * 0.75):
        while await trio.to_thread.run_sync(_burning_children) < fetcher.workers.workers:  # noqa: ASYNC110
            await trio.sleep(0.2)


async def _round(tmp: Path, n: int, process_timeout: float) -> tuple[float, float]:
    """Carol's seconds alone, then beside the hostile jobs (the files are written already)."""
    fetcher = HttpFetcher(process_timeout=process_timeout)
    store = Store.open(str(tmp / f"round{n}.db"))
    config = Config(jobs_per_caller=HOSTILE_JOBS, jobs_total=2 * HOSTILE_JOBS)
    try:
        async with open_runner(store, fetcher, config) as runner:
            await _quick(runner, tmp / f"warm{n}.txt")  # a worker started: alone is warm
            alone = await _quick(runner, tmp / f"alone{n}.txt")
            for i in range(HOSTILE_JOBS):
                caller = HOSTILE_CALLERS[i % len(HOSTILE_CALLERS)]
                path = tmp / f"line{n}-{i}.txt"
                hostile = Target(path.as_uri(), Options(grep=CATASTROPHIC_GREP))
                await runner.submit(caller, "user", [hostile])
            await _all_workers_burning(fetcher)
            beside = await _quick(runner, tmp / f"beside{n}.txt")
            return alone, beside
    finally:
        store.close()


def measure(rounds: int, process_timeout: float) -> dict[str, Any]:
    """``rounds`` rounds; medians of the seconds and of the in-round ratios."""
    alone: list[float] = []
    beside: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(rounds):
            for name in ("warm", "alone", "beside"):
                (Path(tmp) / f"{name}{n}.txt").write_text("a\nb\nc\n")
            for i in range(HOSTILE_JOBS):
                (Path(tmp) / f"line{n}-{i}.txt").write_text("x" * 40 + "\n")
            a, b = trio.run(_round, Path(tmp), n, process_timeout)
            alone.append(a)
            beside.append(b)
    return {
        "rounds": rounds,
        "process_timeout": process_timeout,
        "alone_s": statistics.median(alone),
        "beside_s": statistics.median(beside),
        "beside_vs_alone": statistics.median(map(ratio, beside, alone)),
        "beside_all_s": beside,
    }


def table(figures: dict[str, Any]) -> str:
    """The figures as a Markdown table."""
    return "\n".join(
        [
            machine(),
            f"One caller's one-target grep job, alone and beside {HOSTILE_JOBS} hostile jobs of "
            f"two other callers (process_timeout {figures['process_timeout']:g} s), "
            f"medians of {figures['rounds']} rounds",
            "",
            "| alone (s) | beside (s) | beside vs alone | every round beside (s) |",
            "|---:|---:|---:|---|",
            f"| {figures['alone_s']:.2f} | {figures['beside_s']:.2f} | "
            f"{figures['beside_vs_alone']:.1f}x | "
            + ", ".join(f"{s:.2f}" for s in figures["beside_all_s"])
            + " |",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    """Measure and print the table (``--json`` prints the figures instead)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker_fairness")
    parser.add_argument("--quick", action="store_true", help="2 rounds instead of 5")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--process-timeout", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = measure(args.rounds or (2 if args.quick else 5), args.process_timeout)
    print(json.dumps(figures, indent=2) if args.json else table(figures))


if __name__ == "__main__":
    main()
