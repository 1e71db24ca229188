"""CPU per target of the PostgreSQL runner, client and server, split into the cost of each
outcome and the cost of each job: ``python -m benchmarks.postgres_cpu [--placement P]
[--rounds N]``.

Throughput says how long a target takes; on one core (``--placement one-core``, see
:mod:`benchmarks.placement`) that is the CPU the runner's process and the server spend on it.
This probe counts both directly, in a window that leaves out each row's setup (the store's
opening, the schema, the runner's start and a few jobs of warm-up):

- the client: this process's CPU time (``getrusage``, every thread);
- the server: every server process's CPU time (``/proc/PID/schedstat``, nanoseconds), plus
  what the postmaster reaped meanwhile (its children's ``cutime``/``cstime``);
- by statement: ``pg_stat_statements`` (loaded on the throw-away server), reset at the
  window's start: calls and execution time per target, the statements that cost most.

Each workload runs with jobs of two sizes (``SMALL`` and ``LARGE`` targets); CPU per job is
``a + b * targets``, so the two give ``b``, the steady cost of one outcome, and ``a``, what a
job costs besides (its submit, the drain's start and end, the notifications, ``wait``).
The floor (:func:`benchmarks.postgres.floor_throughput`'s loop) is measured the same way.
Rounds are interleaved; figures are medians.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import trio

from demo.local_postgres import PgServer, start_postgres
from trio_batch import JobState, open_runner

from . import workloads
from .placement import PLACEMENTS, place
from .postgres import floor_jobs, floor_outcomes, fresh_database

SMALL, LARGE = 4, 32
_WARMUP_JOBS = 3


@dataclass(frozen=True)
class Window:
    """CPU seconds spent in one measured window, and what it did."""

    client: float
    server: float
    seconds: float
    jobs: int
    targets: int
    statements: list[tuple[str, int, float]]  # query, calls, total exec ms


def _postmaster(server: PgServer) -> int:
    return int(Path(server.data_dir, "postmaster.pid").read_text().split()[0])


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the server so far: its live processes' and the ones it reaped."""
    total = 0.0
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    for pid in [postmaster, *map(int, children)]:
        try:
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError):
            continue  # gone meanwhile: counted in the postmaster's cutime below
    stat = Path(f"/proc/{postmaster}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return total + (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def client_cpu() -> float:
    """CPU seconds of this process so far, every thread."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Meter:
    """Counts one window on ``server``."""

    def __init__(self, server: PgServer) -> None:
        self.postmaster = _postmaster(server)
        self.admin = psycopg.connect(server.dsn(), autocommit=True)
        self._start: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def start(self) -> None:
        """The window opens now."""
        self.admin.execute("SELECT pg_stat_statements_reset()")
        self._start = (client_cpu(), server_cpu(self.postmaster), time.perf_counter())

    def stop(self, *, jobs: int, targets: int) -> Window:
        """The window closes now: its counts."""
        c1, s1, t1 = client_cpu(), server_cpu(self.postmaster), time.perf_counter()
        c0, s0, t0 = self._start
        rows = self.admin.execute(
            "SELECT query, calls, total_exec_time FROM pg_stat_statements "
            "WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC"
        ).fetchall()
        return Window(c1 - c0, s1 - s0, t1 - t0, jobs, targets, [(q, n, ms) for q, n, ms in rows])


def _runner_window(
    url: str, meter: Meter, *, callers: int, jobs: int, per_job: int
) -> tuple[Window, float]:
    """``callers`` callers each running ``jobs`` jobs of ``per_job`` targets, after a warm-up."""
    store = workloads.open_db(url)

    async def main() -> Window:
        async with open_runner(store, workloads.noop_fetch) as runner:
            for w in range(_WARMUP_JOBS):
                await workloads.run_job(runner, "warm", workloads.job_targets(f"w{w}", per_job))
            statuses: list[JobState] = []

            async def caller(c: int) -> None:
                for j in range(jobs):
                    targets = workloads.job_targets(f"{c}/{j}", per_job)
                    statuses.append(await workloads.run_job(runner, f"c{c}", targets))

            meter.start()
            async with trio.open_nursery() as nursery:
                for c in range(callers):
                    nursery.start_soon(caller, c)
            window = meter.stop(jobs=callers * jobs, targets=callers * jobs * per_job)
        workloads.check_done(statuses)
        return window

    try:
        window = trio.run(main)
    finally:
        workloads.close_db(store)
    return window, window.targets / window.seconds


def _floor_window(url: str, meter: Meter, *, jobs: int, per_job: int) -> tuple[Window, float]:
    """The floor's loop (:func:`benchmarks.postgres.floor_outcomes`) in the window."""
    ids = floor_jobs(url, jobs=jobs, targets_per_job=per_job)
    with psycopg.connect(url, autocommit=True) as conn:
        meter.start()
        floor_outcomes(conn, ids, jobs * per_job, per_job)
        window = meter.stop(jobs=jobs, targets=jobs * per_job)
    return window, window.targets / window.seconds


Measure = Callable[[str, Meter, int], tuple[Window, float]]


def workloads_of(scale: int) -> dict[str, Measure]:
    """Each workload, a function of (fresh database URL, meter, targets per job)."""
    return {
        "floor": lambda url, m, n: _floor_window(url, m, jobs=scale * 1024 // n, per_job=n),
        "serial": lambda url, m, n: _runner_window(
            url, m, callers=1, jobs=scale * 512 // n, per_job=n
        ),
        "8 jobs": lambda url, m, n: _runner_window(
            url, m, callers=8, jobs=scale * 128 // n, per_job=n
        ),
    }


def _per_target(w: Window, cpu: float) -> float:
    return 1e6 * cpu / w.targets


def _split(small: Window, large: Window, cpu: Callable[[Window], float]) -> tuple[float, float]:
    """(µs per outcome, µs per job besides) from the two sizes' windows."""
    s = 1e6 * cpu(small) / small.jobs
    big = 1e6 * cpu(large) / large.jobs
    per_outcome = (big - s) / (LARGE - SMALL)
    return per_outcome, s - SMALL * per_outcome


def _short(query: str) -> str:
    return " ".join(query.split())[:90]


def counted_server(placement: str) -> PgServer:
    """A throw-away server with ``pg_stat_statements`` loaded, placed as ``placement`` says
    (the line saying how on stderr); :meth:`PgServer.destroy` it."""
    server = start_postgres()
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        server.stop("fast")
        server.start()
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        print(place(placement, data_dir=server.data_dir, pooler_pid=None), file=sys.stderr)
    except BaseException:
        server.destroy()
        raise
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.postgres_cpu", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=int, default=4, help="work per window (default 4)")
    parser.add_argument("--placement", choices=PLACEMENTS, default="one-core")
    parser.add_argument("--only", action="append", help="these workloads only (repeatable)")
    parser.add_argument("--statements", type=int, default=8, help="statements shown per row")
    args = parser.parse_args(argv)
    server = counted_server(args.placement)
    try:
        meter = Meter(server)
        chosen = {
            k: v for k, v in workloads_of(args.scale).items() if not args.only or k in args.only
        }
        results: dict[tuple[str, int], list[tuple[Window, float]]] = {}
        order = [(name, n) for name in chosen for n in (SMALL, LARGE)]
        for r in range(args.rounds):
            for name, n in order if r % 2 == 0 else order[::-1]:
                # Each row its own database, made in postgres's: pg_stat_statements is global.
                results.setdefault((name, n), []).append(
                    chosen[name](fresh_database(server), meter, n)
                )
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        report(results, rounds=args.rounds, statements=args.statements)
    finally:
        server.destroy()


def report(
    results: dict[tuple[str, int], list[tuple[Window, float]]], *, rounds: int, statements: int
) -> None:
    """Print the medians: per target at each size, then the split per outcome and per job."""
    print(f"CPU per target (µs), medians of {rounds} rounds")
    for (name, n), runs in results.items():
        rate = statistics.median(r for _, r in runs)
        client = statistics.median(_per_target(w, w.client) for w, _ in runs)
        srv = statistics.median(_per_target(w, w.server) for w, _ in runs)
        print(
            f"  {name:8} {n:3}/job {rate:7.0f} targets/s  client {client:6.1f}  server {srv:6.1f}"
        )
    for name in dict.fromkeys(k for k, _ in results):
        pairs = list(zip(results[(name, SMALL)], results[(name, LARGE)], strict=True))
        for label, cpu in (("client", lambda w: w.client), ("server", lambda w: w.server)):
            splits = [_split(s, big, cpu) for (s, _), (big, _) in pairs]
            outcome = statistics.median(a for a, _ in splits)
            job = statistics.median(b for _, b in splits)
            print(f"  {name:8} {label}: {outcome:6.1f} per outcome, {job:7.0f} per job besides")
    for (name, n), runs in results.items():
        w = runs[len(runs) // 2][0]
        print(f"  {name}, {n}/job, by statement (one round): calls and exec µs per target")
        for query, calls, ms in w.statements[:statements]:
            print(f"    {calls / w.targets:6.3f} x {1000 * ms / max(calls, 1):6.1f} µs = "
                  f"{1000 * ms / w.targets:6.1f}  {_short(query)}")  # fmt: skip


if __name__ == "__main__":
    main()
