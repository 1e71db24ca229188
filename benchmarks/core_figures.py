"""The core's per-target costs, side by side: ``python -m benchmarks.core_figures``.

1. ``Store.record_outcome``: median µs over 10,000 calls on a file database (WAL, the store's
   default ``synchronous=NORMAL``), beside the raw floor (stdlib ``sqlite3``: update the target
   row, bump the lease, commit) on the same schema.
2. The runner's cost per target with a no-op fetch: the median interval between consecutive
   fetch calls of one 1,000-target job (fetch, store the outcome, start the next), in the same
   run, beside the two figures above.

Rounds are interleaved; the machine is shared, so read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import itertools
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import trio

from trio_batch import Config, JobState, Result, Store, Target, open_runner
from trio_batch.store import NewJob


def _jobs(store: Store, count: int, size: int) -> list[str]:
    ids = []
    for n in range(count):
        job, _ = store.create_job(
            NewJob(
                f"caller{n}",
                "bench",
                [Target(f"https://bench.test/{n}/{i}") for i in range(size)],
                ttl=86400,
                targets_per_job=size,
                jobs_per_caller=1,
                jobs_total=count,
                status=JobState.RUNNING,
            )
        )
        ids.append(job.id)
    return ids


def store_write_us(path: Path, calls: int) -> float:
    """Median µs of Store.record_outcome over ``calls`` calls."""
    with Store.open(path) as store:
        ids = _jobs(store, calls // 32 + 1, 32)
        result = Result("")
        times = []
        for n in range(calls):
            start = time.perf_counter()
            store.record_outcome(ids[n // 32], n % 32, result=result, ttl=86400)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def floor_us(path: Path, calls: int) -> float:
    """Median µs of one raw committed write per target: the target row and the job's lease."""
    with Store.open(path) as store:
        ids = _jobs(store, calls // 32 + 1, 32)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    text = '{"content":"","meta":{}}'
    times = []
    for n in range(calls):
        job_id, idx = ids[n // 32], n % 32
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE targets SET status = 'done', result = ?, finished_at = ? "
            "WHERE job_id = ? AND idx = ?",
            (text, time.time(), job_id, idx),
        )
        conn.execute(
            "UPDATE jobs SET targets_done = targets_done + 1, updated_at = ?, expires_at = ? "
            "WHERE id = ?",
            (time.time(), time.time() + 86400, job_id),
        )
        conn.execute("COMMIT")
        times.append(time.perf_counter() - start)
    conn.close()
    return statistics.median(times) * 1e6


def runner_per_target_us(path: Path, targets: int) -> float:
    """Median interval between consecutive fetches of one ``targets``-long job, in µs."""
    calls: list[float] = []

    async def fetch(target: Target) -> Result:
        calls.append(time.perf_counter())
        return Result("")

    async def main() -> None:
        store = Store.open(path)
        config = Config(targets_per_job=targets)
        async with open_runner(store, fetch, config) as runner:
            job_id, _ = await runner.submit(
                "bench", "bench", [Target(f"t{i}") for i in range(targets)]
            )
            await runner.wait(job_id)
        store.close()

    trio.run(main)
    return statistics.median(b - a for a, b in itertools.pairwise(calls)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--targets", type=int, default=1_000)
    args = parser.parse_args()
    rows: dict[str, list[float]] = {"floor": [], "store": [], "runner": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            rows["floor"].append(floor_us(Path(tmp, f"floor{r}.db"), args.calls))
            rows["store"].append(store_write_us(Path(tmp, f"store{r}.db"), args.calls))
            rows["runner"].append(runner_per_target_us(Path(tmp, f"runner{r}.db"), args.targets))
    floor = statistics.median(rows["floor"])
    print(f"medians over {args.rounds} interleaved rounds (file database, WAL, NORMAL)")
    print(f"  raw floor, one commit per target          {floor:7.1f} µs   1.00x")
    for name, label in (
        ("store", f"Store.record_outcome ({args.calls:,} calls)"),
        ("runner", f"runner per target, no-op fetch ({args.targets:,})"),
    ):
        value = statistics.median(rows[name])
        print(f"  {label:<42}{value:7.1f} µs   {value / floor:.2f}x")


if __name__ == "__main__":
    main()
