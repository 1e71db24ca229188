"""``Runner.wait`` answers with the job its drain's last write returned, when that is terminal:
the job as stored, without reading it back, and still None once its lease has lapsed."""

from __future__ import annotations

from typing import Any

import pytest

from trio_batch import Config, Job, JobState, Store, open_runner
from trio_batch.store.sqlite._job_store import SQLiteJobStore

from ..support.fakes import FakeClock, ScriptedFetch, urls

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=1, jobs_total=3)


async def test_wait_returns_the_job_as_stored_without_reading_it_back(
    fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteJobStore(Store.open(), owns_store=True)
    reads: list[str] = []
    real_get_job = store.get_job

    async def counted_get_job(job_id: str, *, now: float) -> Job | None:
        reads.append(job_id)
        return await real_get_job(job_id, now=now)

    monkeypatch.setattr(store, "get_job", counted_get_job)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a", "b", "fail"))
        job = await runner.wait(job_id)
        assert reads == []  # the drain's own answer, not a read
        assert job is not None and job.status == JobState.PARTIAL
        assert job == await real_get_job(job_id, now=clock())


async def test_wait_returns_none_if_the_lease_lapsed_after_the_last_write(
    fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteJobStore(Store.open(), owns_store=True)
    real_record = store.record_outcome

    async def record_then_lapse(*args: Any, **kwargs: Any) -> Job | None:
        job = await real_record(*args, **kwargs)
        if job is not None and job.is_terminal:
            clock.advance(CONFIG.ttl)  # the lease ends before the waiter resumes
        return job

    monkeypatch.setattr(store, "record_outcome", record_then_lapse)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a"))
        assert await runner.wait(job_id) is None
