"""Speed near the latency bound: ``python -m benchmarks.latency [--quick] [--rounds N]
[--backends sqlite,postgres]``.

C callers each submit a job of 32 targets, wait for it with ``runner.wait`` and submit the
next; the fetch sleeps D (``trio.sleep``, a remote page's latency), so no run can pass C / D
targets a second. Beside each run, in the same round, the plain trio program doing the same
waits (C tasks, each sleeping D 32 times per "job", and nothing else). Cases: 64 jobs at
10 ms, 256 jobs at 50 ms, and 8 jobs whose fetch does nothing (the store's own cost, laid
bare). Backends: a SQLite file, and a throw-away local PostgreSQL server on its Unix socket
(demo/local_postgres.py: durability off, so a commit costs CPU and a round trip, no flush).

Per case and backend: targets/s, its ratio to the plain program (taken within each round),
the process's CPU time per stored target (the client's: PostgreSQL's own is not counted), the
mean time a drain waited in ``record_outcome`` for its outcome's commit, and the outcomes per
commit (the group commit's batches). Medians over rounds, the sides in turn, the order
reversed every other round. Read the ratios: the machine may be shared.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trio

from trio_batch import (
    Config,
    Job,
    JobState,
    JobStore,
    OutcomeWrite,
    Result,
    Target,
    open_runner,
    open_store,
)

from .stats import machine, ratio

PER_JOB = 32


@dataclass(frozen=True, slots=True)
class Case:
    """C concurrent callers whose fetch sleeps ``delay``; jobs per caller, full and quick."""

    name: str
    callers: int
    delay: float
    jobs: int
    quick_jobs: int


CASES = (
    Case("64 jobs, 10 ms", 64, 0.010, 4, 2),
    Case("256 jobs, 50 ms", 256, 0.050, 3, 2),
    Case("8 jobs, no-op fetch", 8, 0.0, 40, 15),
)


@dataclass(slots=True)
class Run:
    """One side's run: what it did, in how long, and what its outcomes waited."""

    targets: int
    seconds: float
    cpu: float  # process CPU seconds (every thread)
    waits: list[float] = field(default_factory=list)  # per record_outcome call
    commits: int = 0


async def plain(case: Case, jobs: int) -> Run:
    """The plain trio program: ``case.callers`` tasks doing the same sleeps, nothing else."""

    async def caller() -> None:
        for _ in range(jobs * PER_JOB):
            await trio.sleep(case.delay)

    cpu, start = time.process_time(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(case.callers):
            nursery.start_soon(caller)
    elapsed = time.perf_counter() - start
    return Run(case.callers * jobs * PER_JOB, elapsed, time.process_time() - cpu)


def time_outcomes(store: JobStore, waits: list[float]) -> None:
    """Wrap ``store.record_outcome`` so each call's wait (its commit, shared or not) is
    appended to ``waits``."""
    inner = store.record_outcome

    async def timed(write: OutcomeWrite, *, ttl: float, now: float) -> Job | None:
        start = time.perf_counter()
        try:
            return await inner(write, ttl=ttl, now=now)
        finally:
            waits.append(time.perf_counter() - start)

    store.record_outcome = timed  # type: ignore[method-assign]


async def batch(where: str, case: Case, jobs: int, tag: str) -> Run:
    """trio_batch on the store at ``where``: each caller submits, waits, submits the next."""
    run = Run(case.callers * jobs * PER_JOB, 0.0, 0.0)

    def observe(operation: str, seconds: float) -> None:
        run.commits += operation == "record_outcomes"

    async def fetch(target: Target) -> Result:
        await trio.sleep(case.delay)
        return Result("")

    config = Config(jobs_total=case.callers, jobs_per_caller=1, targets_per_job=PER_JOB)
    store = open_store(where)
    time_outcomes(store, run.waits)
    try:
        async with open_runner(store, fetch, config, on_store_write=observe) as runner:

            async def caller(c: int) -> None:
                for j in range(jobs):
                    urls = (f"https://bench.test/{tag}/{c}/{j}/{i}" for i in range(PER_JOB))
                    job_id, _ = await runner.submit(f"c{c}", "bench", [Target(u) for u in urls])
                    job = await runner.wait(job_id)
                    if job is None or job.status is not JobState.DONE:
                        raise RuntimeError(f"a benchmark job did not finish: {job}")

            cpu, start = time.process_time(), time.perf_counter()
            async with trio.open_nursery() as nursery:
                for c in range(case.callers):
                    nursery.start_soon(caller, c)
            run.seconds = time.perf_counter() - start
            run.cpu = time.process_time() - cpu
    finally:
        await store.aclose()
    return run


@contextlib.contextmanager
def backends(names: list[str]) -> Iterator[tuple[dict[str, Callable[[], str]], str | None]]:
    """Per backend, a function making a fresh, empty store's address; and the PostgreSQL
    server's version if one was started (and is destroyed on leaving)."""
    counter = itertools.count()
    with tempfile.TemporaryDirectory(prefix="tb-bench-") as tmp:
        fresh: dict[str, Callable[[], str]] = {}
        if "sqlite" in names:
            fresh["SQLite"] = lambda: str(Path(tmp) / f"{next(counter)}.db")
        if "postgres" not in names:
            yield fresh, None
            return
        import psycopg

        from demo.local_postgres import start_postgres

        server = start_postgres()
        try:
            with psycopg.connect(server.dsn()) as conn:
                row = conn.execute("SHOW server_version").fetchone()
            fresh["PostgreSQL"] = lambda: server.create_database(f"bench{next(counter)}")
            yield fresh, str(row[0]) if row else "?"
        finally:
            server.destroy()


def measure(
    names: list[str], rounds: int, quick: bool
) -> tuple[dict[tuple[str, str], list[Run]], str]:
    """Every case on every side, ``rounds`` interleaved rounds: the runs, and the machine."""
    runs: dict[tuple[str, str], list[Run]] = {}
    with backends(names) as (fresh, pg_version):
        for r in range(rounds):
            for case in CASES:
                jobs = case.quick_jobs if quick else case.jobs
                sides: list[tuple[str, Callable[[], Awaitable[Run]]]] = [
                    ("plain trio", functools.partial(plain, case, jobs))
                ]
                for name, where in fresh.items():
                    sides.append((name, functools.partial(batch, where(), case, jobs, f"r{r}")))
                for name, side in sides if r % 2 == 0 else sides[::-1]:
                    gc.collect()
                    runs.setdefault((case.name, name), []).append(trio.run(side))
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
        return runs, machine(pg_version)


def table(runs: dict[tuple[str, str], list[Run]], rounds: int) -> str:
    """The Markdown table: medians over rounds; each ratio is to the plain program's run of
    the same round."""
    lines = [
        "| case | side | targets/s | / plain | CPU per target | commit wait (mean) "
        "| outcomes per commit |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for case in CASES:
        base = runs[(case.name, "plain trio")]
        for (name, side), got in runs.items():
            if name != case.name:
                continue
            rate = [g.targets / g.seconds for g in got]
            of_plain = [ratio(a, b.targets / b.seconds) for a, b in zip(rate, base, strict=True)]
            cpu = statistics.median(1e6 * g.cpu / g.targets for g in got)
            row = f"| {name} | {side} | {statistics.median(rate):,.0f} | "
            row += f"{statistics.median(of_plain):.2f}x | {cpu:.0f} µs | "
            if side == "plain trio":
                row += "- | - |"
            else:
                wait = statistics.median(1e6 * statistics.fmean(g.waits) for g in got)
                per_commit = statistics.median(g.targets / max(g.commits, 1) for g in got)
                row += f"{wait:,.0f} µs | {per_commit:.1f} |"
            lines.append(row)
    lines.append("")
    lines.append(f"Medians of {rounds} rounds. Goal: >= 0.9x the plain program at 10 and 50 ms.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Measure and print the table with the machine it ran on."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer jobs and rounds")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--backends", default="sqlite,postgres", help="comma-separated")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 5)
    runs, where = measure(args.backends.split(","), rounds, args.quick)
    print(f"Near the latency bound, {PER_JOB} targets per job\n{where}\n")
    print(table(runs, rounds))


if __name__ == "__main__":
    main()
