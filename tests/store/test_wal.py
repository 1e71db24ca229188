"""The WAL stays bounded while a runner writes: SQLite's automatic checkpoints (every 1000
pages, 4 MB) run on the store thread, where every write is made."""

from __future__ import annotations

from pathlib import Path

from trio_batch import Config, Result, Store, Target, open_runner

from ..support.fakes import FakeClock

#: Outcomes written, 16 kB of result each: about 25 MB, several times the bound below.
OUTCOMES = 64 * 24
#: Twice what the automatic checkpoint lets the WAL reach before it copies it back.
BOUND = 8 * 1024 * 1024


async def _fetch(target: Target) -> Result:
    return Result("x" * 16_000)


async def test_the_wal_stays_bounded_under_a_long_run_of_outcomes(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "jobs.db"
    wal = path.with_name("jobs.db-wal")
    config = Config(ttl=3600, targets_per_job=64, jobs_per_caller=1, jobs_total=4)
    largest = 0
    async with open_runner(Store.open(path), _fetch, config, now=clock) as runner:
        for n in range(OUTCOMES // 64):
            targets = [Target(f"https://example.test/{n}/{i}") for i in range(64)]
            job_id, _ = await runner.submit("alice", "user", targets)
            await runner.wait(job_id)
            largest = max(largest, wal.stat().st_size)
    written = path.stat().st_size  # what the outcomes take once copied into the database
    assert written > 2 * BOUND  # enough written that an unbounded WAL would show
    assert largest <= BOUND, (largest, written)
