"""PostgreSQL rows of ``make bench``: ``python -m benchmarks.postgres [--quick] [--rounds N]
[--only ROW ...] [--placement free|one-core|two-cores]``.

On a throw-away local server (demo/local_postgres.py: Unix socket, ``fsync=off``,
``synchronous_commit=off``, so a commit costs CPU and a socket round trip, not a disk flush),
per round, each on a fresh database:

- **floor**: the writes storing one outcome takes (the target row, the job's counters and
  lease), one transaction per target, on a raw psycopg connection (autocommit, explicit
  ``BEGIN``/``COMMIT``); the jobs are created through the store so the schema is its own;
- **serial**: one runner, jobs of 32 no-op targets run one after another;
- **8 jobs**: one runner, 8 callers each running jobs back to back (8 live at once);
- **8 jobs, 2 outcome connections** and **3**: the same, the outcome writes spread over that
  many connections instead of the default one (``outcome_connections=N`` in the URL);
- **8 jobs, 2 runners**: two runner processes on the same database, 4 callers each, started
  together; targets of both over the time the slower one took;
- **cycle**, 1 caller and 8: the loop an embedding program runs (build a job's targets, submit,
  ``wait``, the next), beside **the bare loop** (:mod:`benchmarks.minimal_postgres`: the least
  trio code with the same guarantees on one synchronous psycopg connection), each cycle also
  as a ratio to the bare loop of its round;
- **serial** and **8 jobs** again **through PgBouncer** (demo/local_pgbouncer.py: transaction
  mode, over TCP on 127.0.0.1, the server behind it on its Unix socket), beside the direct rows
  above: what the pooler's extra hop costs (one runner: ``?listen=off``, LISTEN has nothing
  to tell it), each beside the bare loop through PgBouncer too (no prepared statements there:
  a pooler in transaction mode cannot keep them).

``--placement`` pins the processes to CPUs (:mod:`benchmarks.placement`): ``one-core`` makes
each row measure CPU per target (:mod:`benchmarks.postgres_cpu` counts it, client and server).

Figures are medians over interleaved rounds; ratios to the floor are taken within a round.
Read the ratios, not the absolute figures: the machine is shared. The floor is bimodal on a
busy machine; when its rounds fall in two modes the table says so and adds each row's median
ratio within the fast mode's rounds (:func:`fast_rounds`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

import psycopg
import trio

from demo.local_pgbouncer import PgBouncer, start_pgbouncer, stop_pgbouncer
from demo.local_postgres import PgServer, start_postgres
from trio_batch import JobState, Target
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresStore
from trio_batch.store.sqlite import Store

from . import minimal_postgres, workloads
from .floor import EMPTY_RESULT
from .placement import PLACEMENTS, place

_databases = itertools.count(1)


def fresh_database(server: PgServer) -> str:
    """The URL of a new, empty database on ``server``."""
    return server.create_database(f"bench{next(_databases)}")


def floor_jobs(url: str, *, jobs: int, targets_per_job: int = 32) -> list[str]:
    """``jobs`` running jobs of ``targets_per_job`` targets, made through the store (so the
    schema is its own), for the floor to store outcomes into: their ids."""
    store = PostgresStore.open(url)
    ids = []
    try:
        for n in range(jobs):
            job, _ = store.create_job(
                NewJob(
                    f"floor{n}",
                    "bench",
                    [Target(f"https://floor.test/{n}/{i}") for i in range(targets_per_job)],
                    ttl=86400,
                    targets_per_job=targets_per_job,
                    jobs_per_caller=1,
                    jobs_total=jobs,
                    status=JobState.RUNNING,
                ),
                now=time.time(),
            )
            ids.append(job.id)
    finally:
        store.close()
    return ids


def floor_outcomes(
    conn: psycopg.Connection[Any], jobs: list[str], targets: int, per_job: int
) -> None:
    """The floor's loop: ``targets`` outcomes into ``jobs`` (of ``per_job`` targets each), one
    committed transaction per target on ``conn`` (autocommit, explicit ``BEGIN``/``COMMIT``)."""
    for n in range(targets):
        job_id, idx = jobs[n // per_job], n % per_job
        now = time.time()
        with conn.transaction():
            conn.execute(
                "UPDATE targets SET status = 'done', result = %s, finished_at = %s, "
                "attempts = 1 WHERE job_id = %s AND idx = %s AND status = 'pending'",
                (EMPTY_RESULT, now, job_id, idx),
            )
            conn.execute(
                "UPDATE jobs SET targets_done = targets_done + 1, updated_at = %s, "
                "expires_at = %s WHERE id = %s",
                (now, now + 86400, job_id),
            )


def floor_throughput(url: str, *, targets: int, targets_per_job: int = 32) -> float:
    """Targets/s of one committed transaction per target on a raw psycopg connection."""
    jobs = floor_jobs(url, jobs=targets // targets_per_job + 1, targets_per_job=targets_per_job)
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        floor_outcomes(conn, jobs, targets, targets_per_job)
        elapsed = time.perf_counter() - start
    return targets / elapsed


def two_runners_throughput(url: str, *, jobs_per_caller: int, targets_per_job: int = 32) -> float:
    """Targets/s of 8 callers split over two runner processes on one database."""
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.postgres", "--child", url, str(k)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "up"
        for child in children:
            assert child.stdin is not None
            child.stdin.write(f"{jobs_per_caller} {targets_per_job}\n")
            child.stdin.flush()
        answers = [json.loads(child.stdout.readline()) for child in children if child.stdout]
    finally:
        for child in children:
            if child.stdin is not None:
                child.stdin.close()
            child.wait(timeout=60)
    return float(sum(a["targets"] for a in answers) / max(a["seconds"] for a in answers))


def _child(url: str, k: int) -> None:
    """One of :func:`two_runners_throughput`'s processes: 4 callers, started on a line of stdin."""
    from trio_batch import open_runner

    async def main() -> None:
        store = workloads.open_db(url)
        assert not isinstance(store, Store)  # a postgresql:// URL
        async with open_runner(store, workloads.noop_fetch) as runner:
            print("up", flush=True)
            line = await trio.to_thread.run_sync(sys.stdin.readline)
            jobs_per_caller, per_job = map(int, line.split())
            statuses: list[JobState] = []

            async def caller(c: int) -> None:
                for j in range(jobs_per_caller):
                    targets = workloads.job_targets(f"two/{k}/{c}/{j}", per_job)
                    statuses.append(await workloads.run_job(runner, f"r{k}c{c}", targets))

            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for c in range(4):
                    nursery.start_soon(caller, c)
            elapsed = time.perf_counter() - start
        await store.aclose()
        workloads.check_done(statuses)
        print(json.dumps({"targets": 4 * jobs_per_caller * per_job, "seconds": elapsed}))

    trio.run(main)


def _through(bouncer: PgBouncer, url: str) -> str:
    """The database of ``url`` (a direct one) through the pooler."""
    return bouncer.url(url.split("/")[3].split("?")[0])


def _with(url: str, parameter: str) -> str:
    """``url`` with one more query parameter (trio_batch's own, such as
    ``outcome_connections=2``)."""
    return f"{url}{'&' if '?' in url else '?'}{parameter}"


def steps(
    bouncer: PgBouncer, *, floor_targets: int, serial_jobs: int, per_caller: int
) -> list[tuple[str, Callable[[str], float]]]:
    """Each row's measurement: a function of a fresh database's (direct) URL."""

    def pooled(url: str) -> str:  # one runner, so no LISTEN
        return f"{_through(bouncer, url)}?listen=off"

    return [
        ("floor", lambda url: floor_throughput(url, targets=floor_targets)),
        ("serial", lambda url: workloads.measure_serial(url, jobs=serial_jobs)),
        (
            "8 jobs",
            lambda url: workloads.measure_concurrent(url, jobs_per_caller=per_caller).targets_per_s,
        ),
        (
            "8 jobs, 2 outcome connections",
            lambda url: (
                workloads.measure_concurrent(
                    _with(url, "outcome_connections=2"), jobs_per_caller=per_caller
                ).targets_per_s
            ),
        ),
        (
            "8 jobs, 3 outcome connections",
            lambda url: (
                workloads.measure_concurrent(
                    _with(url, "outcome_connections=3"), jobs_per_caller=per_caller
                ).targets_per_s
            ),
        ),
        (
            "8 jobs, 2 runners",
            lambda url: two_runners_throughput(url, jobs_per_caller=per_caller),
        ),
        (
            "cycle, 1 caller",
            lambda url: workloads.measure_cycle(url, callers=1, jobs_per_caller=serial_jobs),
        ),
        (
            "bare loop, 1 caller",
            lambda url: minimal_postgres.measure(url, callers=1, jobs=serial_jobs),
        ),
        (
            "cycle, 8 callers",
            lambda url: workloads.measure_cycle(url, callers=8, jobs_per_caller=per_caller),
        ),
        (
            "bare loop, 8 callers",
            lambda url: minimal_postgres.measure(url, callers=8, jobs=per_caller),
        ),
        (
            "serial, through PgBouncer",
            lambda url: workloads.measure_serial(pooled(url), jobs=serial_jobs),
        ),
        (
            "bare loop, 1 caller, through PgBouncer",
            lambda url: minimal_postgres.measure(
                _through(bouncer, url), callers=1, jobs=serial_jobs, pooled=True
            ),
        ),
        (
            "8 jobs, through PgBouncer",
            lambda url: (
                workloads.measure_concurrent(pooled(url), jobs_per_caller=per_caller).targets_per_s
            ),
        ),
        (
            "bare loop, 8 callers, through PgBouncer",
            lambda url: minimal_postgres.measure(
                _through(bouncer, url), callers=8, jobs=per_caller, pooled=True
            ),
        ),
    ]


def run(
    server: PgServer,
    bouncer: PgBouncer,
    *,
    rounds: int,
    only: Collection[str] = (),
    **sizes: int,
) -> dict[str, list[float]]:
    """Every measurement (``only``: those named, and the floor) once per round, in turn, the
    order reversed every other round; figures per round."""
    rows: dict[str, list[float]] = {}
    chosen = [
        (name, measure)
        for name, measure in steps(bouncer, **sizes)
        if not only or name in only or name == "floor"
    ]
    for r in range(rounds):
        for name, measure in chosen if r % 2 == 0 else chosen[::-1]:
            rows.setdefault(name, []).append(measure(fresh_database(server)))
        figures = ", ".join(f"{name} {values[-1]:.0f}" for name, values in rows.items())
        print(f"round {r + 1}/{rounds}: {figures}", file=sys.stderr)
    return rows


#: The bare loop each row is set beside: the same callers, the same path to the server.
BARE_LOOP_OF = {
    "cycle, 1 caller": "bare loop, 1 caller",
    "cycle, 8 callers": "bare loop, 8 callers",
    "serial, through PgBouncer": "bare loop, 1 caller, through PgBouncer",
    "8 jobs, through PgBouncer": "bare loop, 8 callers, through PgBouncer",
}


#: Floor rounds this many times apart or more are two modes of it (see :func:`fast_rounds`).
FLOOR_MODE_GAP = 1.5


def fast_rounds(floor: list[float]) -> list[int] | None:
    """The rounds of the floor's fast mode, or None if it has one mode.

    The floor (two processes passing one message back and forth) runs at about twice its
    speed in some rounds, when a core is free for each: its rounds, sorted, split at the
    widest ratio between neighbours if that is :data:`FLOOR_MODE_GAP` or more.
    """
    ranked = sorted(range(len(floor)), key=floor.__getitem__)
    gaps = [floor[ranked[i + 1]] / floor[ranked[i]] for i in range(len(ranked) - 1)]
    if not gaps or max(gaps) < FLOOR_MODE_GAP:
        return None
    return sorted(ranked[gaps.index(max(gaps)) + 1 :])


def render(rows: dict[str, list[float]], *, placement: str = "") -> str:
    """The table: median targets/s and the median within-round ratio to the floor; if the
    floor had two modes, also the median ratio within the rounds of its fast one."""
    floor = rows["floor"]
    lines = [f"PostgreSQL (local throw-away server), medians over {len(floor)} rounds"]
    if placement:
        lines.append(f"  {placement}")
    fast = fast_rounds(floor)
    if fast is not None:
        slow = [f for i, f in enumerate(floor) if i not in fast]
        quick = [floor[i] for i in fast]
        lines.append(
            f"  the floor had two modes: {len(slow)} rounds {min(slow):.0f}-{max(slow):.0f}, "
            f"{len(quick)} rounds {min(quick):.0f}-{max(quick):.0f} targets/s "
            "(the fast one's ratios last)"
        )
    for name, values in rows.items():
        ratio = statistics.median(v / f for v, f in zip(values, floor, strict=True))
        line = f"  {name:<42}{statistics.median(values):9.0f} targets/s   {ratio:.2f}x floor"
        bare = rows.get(BARE_LOOP_OF.get(name, ""))
        if bare is not None:
            of_bare = statistics.median(v / b for v, b in zip(values, bare, strict=True))
            line += f"   {of_bare:.2f}x the bare loop"
        if fast is not None and name != "floor":
            line += f"   {statistics.median(values[i] / floor[i] for i in fast):.2f}x fast floor"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.postgres", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="reduced sizes")
    parser.add_argument("--rounds", type=int)
    parser.add_argument(
        "--only",
        action="append",
        metavar="ROW",
        help="measure this row (repeatable; the floor always is), e.g. --only serial",
    )
    parser.add_argument(
        "--placement",
        choices=PLACEMENTS,
        default="free",
        help="pin the processes to CPUs (see benchmarks/placement.py); default free",
    )
    parser.add_argument("--child", nargs=2, metavar=("URL", "K"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]))
        return
    sizes: dict[str, Any] = (
        {"rounds": 3, "floor_targets": 2000, "serial_jobs": 20, "per_caller": 4}
        if args.quick
        else {"rounds": 5, "floor_targets": 6000, "serial_jobs": 60, "per_caller": 12}
    )
    if args.rounds:
        sizes["rounds"] = args.rounds
    if args.only:
        sizes["only"] = set(args.only)
    server = start_postgres()
    try:
        bouncer = start_pgbouncer(server)
        try:
            where = place(args.placement, data_dir=server.data_dir, pooler_pid=bouncer.proc.pid)
            print(where, file=sys.stderr)
            print(render(run(server, bouncer, **sizes), placement=where))
        finally:
            stop_pgbouncer(bouncer)
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
