"""The WAL stays bounded while the runner writes on the loop thread's fast path."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from trio_batch import Config, Result, Store, Target, open_runner
from trio_batch.store.sqlite import _job_store


async def test_the_wal_is_checkpointed_and_stays_bounded_under_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fast connection never checkpoints itself; the store thread must, often enough.
    monkeypatch.setattr(_job_store, "CHECKPOINT_EVERY", 100)
    path = tmp_path / "jobs.db"
    store = Store.open(path)

    async def fetch(target: Target) -> Result:
        return Result("x" * 1000)

    config = Config(targets_per_job=500, jobs_per_caller=8)
    async with open_runner(store, fetch, config) as runner:
        for job in range(6):
            job_id, _ = await runner.submit(
                "a", "user", [Target(f"u{job}/{i}") for i in range(500)]
            )
            await runner.wait(job_id)
        wal = (await trio.Path(f"{path}-wal").stat()).st_size
    # 3,000 commits of several pages each would be tens of MB if the WAL were never reset.
    assert wal < 4 * 1024 * 1024, f"the WAL grew to {wal:,} bytes"
