"""The WAL stays bounded while the runner writes on the loop thread's fast path."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import trio

from trio_batch import Config, Job, OutcomeWrite, Result, Store, Target, open_runner
from trio_batch.store.sqlite import SQLiteJobStore, _job_store


async def test_the_wal_is_checkpointed_and_stays_bounded_under_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fast connection never checkpoints itself; the store thread must, often enough.
    monkeypatch.setattr(_job_store, "CHECKPOINT_EVERY", 100)
    restarts = 0
    real_checkpoint = Store.checkpoint

    def checkpoint(self: Store, mode: str = "TRUNCATE") -> None:
        nonlocal restarts
        real_checkpoint(self, mode)
        restarts += mode == "RESTART"

    monkeypatch.setattr(Store, "checkpoint", checkpoint)
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
    # 3,000 commits: about 30 checkpoints, each ending in a restart of the WAL (fewer when a
    # copy runs long, as the commits made meanwhile start no second one).
    assert restarts >= 5
    # Never reset, those commits (three pages or so each) would make a WAL of about 37 MB. A
    # cycle holds CHECKPOINT_EVERY commits and those made while the WAL is copied.
    assert wal < 16 * 1024 * 1024, f"the WAL grew to {wal:,} bytes"


async def test_the_loop_keeps_writing_while_the_wal_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checkpoint copies the WAL without the write lock (PASSIVE) while the fast path goes
    # on writing, then restarts it (RESTART): only then do the loop's calls wait. The copy is
    # held open here until the loop has written more outcomes; had those writes waited for
    # the checkpoint, they would wait for ever (the hang guard would fail the test).
    monkeypatch.setattr(_job_store, "CHECKPOINT_EVERY", 5)
    copying, release = threading.Event(), threading.Event()
    modes: list[str] = []
    real_checkpoint = Store.checkpoint

    def checkpoint(self: Store, mode: str = "TRUNCATE") -> None:
        modes.append(mode)
        if mode == "PASSIVE":
            copying.set()
            release.wait(60)
        real_checkpoint(self, mode)

    monkeypatch.setattr(Store, "checkpoint", checkpoint)
    now = 1_000_000.0
    with trio.fail_after(60):
        async with SQLiteJobStore(Store.open(tmp_path / "jobs.db"), owns_store=True) as store:
            job, _ = await store.create_job(
                "alice",
                "user",
                [Target(f"https://example.test/{i}") for i in range(30)],
                ttl=3600,
                targets_per_job=30,
                jobs_per_caller=1,
                jobs_total=1,
                now=now,
            )
            seen: Job | None = job
            for i in range(6):  # the fifth fast-path call schedules a checkpoint
                write = OutcomeWrite(job.id, i, result=Result("x" * 100), seen=seen)
                seen = await store.record_outcome(write, ttl=3600, now=now)
            await trio.to_thread.run_sync(copying.wait)
            for i in range(6, 26):  # the store thread is held inside the copy
                write = OutcomeWrite(job.id, i, result=Result("x" * 100), seen=seen)
                seen = await store.record_outcome(write, ttl=3600, now=now)
            assert seen is not None and seen.targets_done == 26
            assert modes == ["PASSIVE"]
            release.set()
            await store.list_jobs(now=now)  # queued on the thread behind the checkpoint
            assert modes == ["PASSIVE", "RESTART"]
            assert not store._checkpoint_pending and not store._checkpoint_scheduled
            status = await store.get_status(job.id, now=now)
    assert status is not None
    assert [t.status for t in status[1]] == ["done"] * 26 + ["pending"] * 4
