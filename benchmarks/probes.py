"""Focused measurements behind the performance notes: ``python -m benchmarks.probes [NAME]``.

Not part of ``make bench``; each probe answers one question, alternating what it compares in
one run (the machine is shared and noisy: read the ratios, not the absolute times).

- ``sql``: the store's outcome statements on a raw ``sqlite3`` connection, beside the floor
  (:mod:`benchmarks.floor`): the outcome stored if the job is as last seen, then the job
  bumped (``STORE_OUTCOME_AS_SEEN``, ``BUMP_SEEN_JOB``: what the store runs), with the job
  row's ``RETURNING`` (its fallback when the job changed), with an ``UPDATE`` then a
  ``SELECT`` instead, and with neither (no answer at all).
- ``budget``: 8 concurrent jobs beside a 1 ms heartbeat, with the fast path's loop budget
  (``FAST_PASS_BUDGET``) and without it: throughput, and how late the heartbeat woke.
- ``checkpoint``: serial throughput with the fast path's WAL checkpoint in steps (the
  store's: two ``PASSIVE`` copies, the loop writing beside them and the side thread making the
  calls it declines, then ``RESTART``) and as one ``RESTART`` that every call waits for (the
  store's before), and how long the loop waited for calls made off it.
- ``watch``: one job of n targets with a fetch that yields, awaited with and without a
  :meth:`~trio_batch.Runner.watch` beside it.
- ``cycle`` and ``layers``: the SQLite submit -> drain -> wait cycle beside the bare loop, and
  one outcome write's cost layer by layer (:mod:`benchmarks.cycle_probes`).
- ``minimal``: serial and 8 concurrent jobs in the least trio code that keeps the guarantees
  (:mod:`benchmarks.minimal`), with and without savepoints, beside trio_batch and the floor.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

import trio
import trio.lowlevel

from trio_batch import Config, Result, Store, Target, open_runner
from trio_batch.store._thread import StoreThread
from trio_batch.store.sqlite import _fast_path, _job_store, _paths
from trio_batch.store.sqlite import _queries as q

from . import cycle_probes, floor, minimal
from .workloads import job_targets, measure_concurrent, measure_serial, noop_fetch, run_job

_ROUNDS = 3


def _scratch(name: str) -> str:
    return os.path.join(tempfile.mkdtemp(prefix="trio-batch-probe-"), name)


# ---------------------------------------------------------------------------------------------
# sql


def _outcome_sql(path: str, variant: str, targets: int = 9_600, per_job: int = 32) -> float:
    """Targets/s of the store's outcome statements, one transaction each, on a raw connection."""
    floor.create_db(path)
    conn = floor.connect(path)
    bump_only = q.BUMP_JOB.split(" RETURNING")[0]
    select_job = f"SELECT {q.JOB_COLUMNS} FROM jobs WHERE id = ?"
    try:
        work = floor.pending_work(conn, targets, per_job)
        seen = {row[0]: row for row in conn.execute(f"SELECT {q.JOB_COLUMNS} FROM jobs")}
        done = dict.fromkeys(seen, 0)
        start = time.perf_counter()
        for job_id, idx in work:
            t = time.time()
            conn.execute("BEGIN IMMEDIATE")
            outcome = ("done", floor.EMPTY_RESULT, None, None, t, 1, job_id, idx)
            if variant == "as seen":
                job = seen[job_id]
                match = (job[0], t, job[1], job[2], done[job_id], 0, job[9], job[3], *job[6:9])
                conn.execute(q.STORE_OUTCOME_AS_SEEN, (*outcome, *match))
                conn.execute(q.BUMP_SEEN_JOB, (0, 24, t, t + 86400, job_id))
                done[job_id] += 1
                conn.execute("COMMIT")
                continue
            if variant == "returning":
                conn.execute(q.BUMP_JOB, (0, 24, t, t + 86400, job_id, t)).fetchone()
            elif variant == "update+select":
                conn.execute(bump_only, (0, 24, t, t + 86400, job_id, t))
                conn.execute(select_job, (job_id,)).fetchone()
            else:
                conn.execute(bump_only, (0, 24, t, t + 86400, job_id, t))
            conn.execute(q.STORE_OUTCOME, outcome)
            conn.execute("COMMIT")
        return len(work) / (time.perf_counter() - start)
    finally:
        conn.close()


def probe_sql(*, targets: int = 9_600, rounds: int = _ROUNDS) -> None:
    for r in range(rounds):
        at_floor = floor.floor_throughput(_scratch("floor.db"), targets=targets)
        cells = [f"round {r + 1}: floor {at_floor:,.0f}/s"]
        for variant in ("as seen", "returning", "update+select", "neither"):
            rate = _outcome_sql(_scratch(f"{variant}.db"), variant, targets=targets)
            cells.append(f"{variant} {rate / at_floor:.2f}x")
        print(", ".join(cells), flush=True)


# ---------------------------------------------------------------------------------------------
# checkpoint


def _restart_alone(self: _job_store.SQLiteJobStore) -> None:
    """The store's checkpoint before the two steps: one ``RESTART``, every call waiting."""
    try:
        self.store.checkpoint("RESTART")
    finally:
        self._checkpoint_copying = False
        self._checkpoint_pending = False


def _serial(variant: str, jobs: int = 400) -> tuple[float, float]:
    """(µs per target, µs per target the loop waited for calls made off it) in ``variant``."""
    store = Store.open(_scratch("serial.db"))
    waited = 0.0
    real_run = StoreThread.run
    store_class = _job_store.SQLiteJobStore
    real = store_class._checkpoint, store_class._fast_beside_checkpoint

    async def timed_run(self: StoreThread, fn: Callable[..., object], *a: object,
                        **k: object) -> object:  # fmt: skip
        nonlocal waited
        started = time.perf_counter()
        try:
            return await real_run(self, fn, *a, **k)
        finally:
            waited += time.perf_counter() - started

    batches = [job_targets(f"probe/{j}", 32) for j in range(jobs)]

    async def main() -> float:
        async with open_runner(store, noop_fetch) as runner:
            await runner.purge_expired()
            started = time.perf_counter()
            for targets in batches:
                await run_job(runner, "probe", targets)
            return time.perf_counter() - started

    StoreThread.run = timed_run  # type: ignore[method-assign,assignment]
    if variant == "RESTART alone":
        store_class._checkpoint = _restart_alone  # type: ignore[method-assign,assignment]
        store_class._fast_beside_checkpoint = lambda *_: _fast_path.MISS  # type: ignore[method-assign]
    try:
        elapsed = trio.run(main)
    finally:
        StoreThread.run = real_run  # type: ignore[method-assign]
        store_class._checkpoint, store_class._fast_beside_checkpoint = real  # type: ignore[method-assign]
        store.close()
    n = jobs * 32
    return elapsed / n * 1e6, waited / n * 1e6


def probe_checkpoint(*, jobs: int = 400, rounds: int = _ROUNDS) -> None:
    for r in range(rounds):
        cells = [f"round {r + 1}:"]
        for variant in ("two steps", "RESTART alone"):
            per_target, waited = _serial(variant, jobs)
            cells.append(f"{variant} {per_target:.1f} us/target (waited {waited:.1f})")
        print(" ".join(cells), flush=True)


# ---------------------------------------------------------------------------------------------
# budget


def _beside_8_jobs(budget: float, jobs_per_caller: int) -> tuple[float, list[float]]:
    """(targets/s, heartbeat lateness in seconds) of 8 concurrent callers at ``budget``."""
    saved = _paths.FAST_PASS_BUDGET
    _paths.FAST_PASS_BUDGET = budget
    try:
        got = measure_concurrent(
            _scratch("budget.db"), jobs_per_caller=jobs_per_caller, heartbeat=True
        )
    finally:
        _paths.FAST_PASS_BUDGET = saved
    return got.targets_per_s, got.lateness


def probe_budget(*, jobs_per_caller: int = 25, rounds: int = _ROUNDS) -> None:
    variants = {"with the budget": _paths.FAST_PASS_BUDGET, "without": float("inf")}
    for r in range(rounds):
        cells = [f"round {r + 1}:"]
        for name, budget in variants.items():
            rate, lateness = _beside_8_jobs(budget, jobs_per_caller)
            late = sorted(lateness)
            p99 = late[int(0.99 * (len(late) - 1))] * 1e3
            cells.append(f"{name} {rate:,.0f}/s, p99 {p99:.2f} ms, max {late[-1] * 1e3:.2f} ms")
        print(" ".join(cells), flush=True)


# ---------------------------------------------------------------------------------------------
# watch


async def _yielding_fetch(target: Target) -> Result:
    await trio.lowlevel.checkpoint()  # as any real fetch does: the watcher wakes in between
    return Result("x" * 200, {"status": 200})


def _follow(n: int, watch: bool) -> float:
    store = Store.open(_scratch("watch.db"))

    async def main() -> float:
        async with open_runner(store, _yielding_fetch, Config(targets_per_job=n)) as runner:
            started = time.perf_counter()
            targets = [Target(f"https://probe.test/{i}") for i in range(n)]
            job_id, _ = await runner.submit("probe", "user", targets)
            if watch:
                async for _ in runner.watch(job_id):
                    pass
            else:
                await runner.wait(job_id)
            return time.perf_counter() - started

    try:
        return trio.run(main)
    finally:
        store.close()


def probe_watch(*, sizes: tuple[int, ...] = (1_000, 2_000, 4_000)) -> None:
    for n in sizes:
        alone, watched = _follow(n, watch=False), _follow(n, watch=True)
        print(f"{n:,} targets: {alone:.2f} s awaited, {watched:.2f} s watched", flush=True)


# ---------------------------------------------------------------------------------------------
# minimal


def probe_minimal(*, jobs: int = 40, targets: int = 9_600, rounds: int = _ROUNDS) -> None:
    for r in range(rounds):
        at_floor = floor.floor_throughput(_scratch("floor.db"), targets=targets)
        cells = [f"round {r + 1}: floor {at_floor:,.0f}/s;"]
        for name, callers in (("serial", 1), ("8 jobs", 8)):
            n = jobs * 8 // callers  # the same number of targets either way
            least = minimal.measure(_scratch("minimal.db"), callers=callers, jobs=n)
            bare = minimal.measure(_scratch("bare.db"), callers=callers, jobs=n, savepoints=False)
            if callers == 1:
                runner = measure_serial(_scratch("runner.db"), jobs=n)
            else:
                runner = measure_concurrent(_scratch("runner.db"), jobs_per_caller=n).targets_per_s
            cells.append(
                f"{name}: minimal {least / at_floor:.2f}x (without savepoints "
                f"{bare / at_floor:.2f}x), trio_batch {runner / at_floor:.2f}x;"
            )
        print(" ".join(cells), flush=True)


PROBES: dict[str, Callable[[], object]] = {
    "sql": probe_sql,
    "checkpoint": probe_checkpoint,
    "budget": probe_budget,
    "watch": probe_watch,
    "minimal": probe_minimal,
    "cycle": cycle_probes.probe_cycle,
    "layers": cycle_probes.probe_layers,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.probes", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(PROBES)} (all)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in PROBES]
    if unknown:
        parser.error(f"no probe named {', '.join(unknown)}; there are {', '.join(PROBES)}")
    for name in args.names or PROBES:
        print(f"== {name}", flush=True)
        PROBES[name]()


if __name__ == "__main__":
    main()
