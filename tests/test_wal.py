"""The WAL stays bounded while the runner writes on the loop thread's fast path."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from trio_batch import Config, Result, Store, Target, open_runner
from trio_batch.store.sqlite import _job_store


async def _fetch(target: Target) -> Result:
    return Result("x" * 1000)


async def test_the_wal_is_checkpointed_and_stays_bounded_under_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fast connection never checkpoints itself; the store thread must, often enough.
    monkeypatch.setattr(_job_store, "CHECKPOINT_EVERY", 100)
    path = tmp_path / "jobs.db"
    store = Store.open(path)
    config = Config(targets_per_job=500, jobs_per_caller=8)
    async with open_runner(store, _fetch, config) as runner:
        for job in range(6):
            job_id, _ = await runner.submit(
                "a", "user", [Target(f"u{job}/{i}") for i in range(500)]
            )
            await runner.wait(job_id)
        wal = (await trio.Path(f"{path}-wal").stat()).st_size
    # 3,000 commits of several pages each would be tens of MB if the WAL were never reset.
    assert wal < 4 * 1024 * 1024, f"the WAL grew to {wal:,} bytes"


async def test_the_loop_never_writes_while_the_wal_is_checkpointed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkpoint syncs the WAL and the database file; a fast-path write beside it could wait
    # in the kernel for those flushes, on the loop thread. So while one runs, the loop's calls
    # go to the store thread, and queue behind it there.
    monkeypatch.setattr(_job_store, "CHECKPOINT_EVERY", 5)
    store = Store.open(tmp_path / "jobs.db")
    checkpoints: list[tuple[str, bool]] = []
    faces: list[_job_store.SQLiteJobStore] = []
    real_checkpoint = Store.checkpoint

    def checkpoint(self: Store, mode: str = "TRUNCATE") -> None:
        # On the store thread: is the fast path shut for the whole checkpoint?
        checkpoints.append((mode, all(face._checkpoint_pending for face in faces)))
        real_checkpoint(self, mode)

    monkeypatch.setattr(Store, "checkpoint", checkpoint)
    async with open_runner(store, _fetch, Config(targets_per_job=60)) as runner:
        face = runner.store
        assert isinstance(face, _job_store.SQLiteJobStore)
        faces.append(face)
        job_id, _ = await runner.submit("a", "user", [Target(f"u/{i}") for i in range(60)])
        job = await runner.wait(job_id)
    store.close()
    assert job is not None and job.targets_done == 60
    assert len(checkpoints) >= 5
    assert all(shut for _, shut in checkpoints), checkpoints
