"""Admission: a submit is reused or refused by the create's first read, its arguments are
checked before any store call, and a refusal leaves nothing behind (no job, no drain, no frame
of the store kept alive while the caller backs off).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

import pytest

from trio_batch import (
    Busy,
    CallerBusy,
    Config,
    InvalidRequest,
    InvalidTargets,
    JobStore,
    RunnerClosed,
    TooManyTargets,
    open_runner,
)
from trio_batch.runner import _submit
from trio_batch.store import NewJob

from ..support.fakes import FakeClock, ScriptedFetch, urls

CONFIG = Config(ttl=100, targets_per_job=4, jobs_per_caller=1, jobs_total=2)


@dataclass
class Built:
    """What the runner made for submits: job ids and store creates."""

    ids: int = 0
    creates: int = 0

    def reset(self) -> None:
        self.ids = self.creates = 0


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch, job_store: JobStore) -> Built:
    counts = Built()
    real_id, real_create = _submit.new_job_id, job_store.create_job

    def new_job_id() -> str:
        counts.ids += 1
        return real_id()

    async def create_job(new: NewJob, *, now: float) -> Any:
        counts.creates += 1
        return await real_create(new, now=now)

    monkeypatch.setattr(_submit, "new_job_id", new_job_id)
    monkeypatch.setattr(job_store, "create_job", create_job)
    return counts


async def test_a_refused_submit_leaves_nothing_behind(
    job_store: JobStore, built: Built, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        alices, _ = await runner.submit("alice", "user", urls("x/hang"))
        await runner.submit("bob", "user", urls("y/hang"))
        built.reset()
        with pytest.raises(CallerBusy) as busy_caller:
            await runner.submit("alice", "user", urls("other"))
        assert busy_caller.value.job_id == alices  # it names the job to wait for
        with pytest.raises(Busy) as busy:
            await runner.submit("carol", "user", urls("w"))
        with pytest.raises(TooManyTargets):
            await runner.submit("dave", "user", urls(*"abcde"))
        assert built.creates == 3  # one store call each
        assert len(runner._drains) == 2  # no drain left for the refused ones
        assert len(await job_store.list_jobs(now=clock())) == 2
        frames = [frame for frame, _ in traceback.walk_tb(busy.value.__traceback__)]
        ours = [f.f_code.co_qualname for f in frames if "trio_batch" in f.f_code.co_filename]
        assert ours == ["Runner.submit"]
        assert {"drain", "request"}.isdisjoint(frames[-1].f_locals)


async def test_a_reuse_is_answered_while_the_lease_lasts(
    job_store: JobStore, built: Built, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a"))
        await runner.wait(job_id)
        built.reset()
        clock.advance(CONFIG.ttl - 1)  # reused whatever its status, while its lease lasts
        assert await runner.submit("alice", "user", urls("a")) == (job_id, True)
        assert built.creates == 1 and job_id not in runner._drains
        clock.advance(1)  # the lease has lapsed: the same targets make a new job
        fresh, reused = await runner.submit("alice", "user", urls("a"))
        assert not reused and fresh != job_id
        await runner.wait(fresh)


async def test_arguments_are_checked_before_any_store_call(
    job_store: JobStore, built: Built, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # Every slot taken: a malformed submit is still told what is wrong with it, not Busy.
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        await runner.submit("alice", "user", urls("x/hang"))
        await runner.submit("bob", "user", urls("y/hang"))
        built.reset()
        with pytest.raises(InvalidTargets):
            await runner.submit("carol", "user", [])
        with pytest.raises(InvalidRequest):
            await runner.submit("", "user", urls("w"))
        with pytest.raises(InvalidRequest):
            await runner.submit("carol", "user", urls("w"), metadata={"bad key": "v"})
        with pytest.raises(InvalidRequest):
            await runner.submit("carol", "user", urls("w"), parent_id="not an id")
        assert built == Built()
    with pytest.raises(RunnerClosed):
        await runner.submit("carol", "user", urls("w"))
    assert built == Built()
