"""Admission: a submit is reused or refused by one store read (:meth:`JobStore.admit`) before
anything of its job is built, and the create that follows still checks under the store's lock.

Under load most submits are refused: each one used to make a job id, a drain, a store request
(and a span) for nothing. SQLite reads on the fast path; PostgreSQL's admit reads nothing (a
round trip of its own would cost every accepted submit more than it spares a refusal), so the
checks of what is built run on SQLite, those of the create's own checks on every backend.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trio_batch import (
    Busy,
    CallerBusy,
    Config,
    InvalidRequest,
    InvalidTargets,
    JobState,
    JobStore,
    RunnerClosed,
    Store,
    Target,
    TooManyTargets,
    open_runner,
)
from trio_batch.runner import _submit
from trio_batch.store import Admission, NewJob, SQLiteJobStore

from ..support.fakes import FakeClock, ScriptedFetch, urls

CONFIG = Config(ttl=100, targets_per_job=4, jobs_per_caller=1, jobs_total=2)


@dataclass
class Built:
    """What the runner made for submits: job ids, drains, store creates, admission reads."""

    ids: int = 0
    drains: int = 0
    creates: int = 0
    admits: int = 0

    def reset(self) -> None:
        self.ids = self.drains = self.creates = self.admits = 0


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch, job_store: JobStore) -> Built:
    counts = Built()
    real_id, real_drain = _submit.new_job_id, _submit._Drain
    real_create, real_admit = job_store.create_job, job_store.admit

    def new_job_id() -> str:
        counts.ids += 1
        return real_id()

    def drain(*args: Any, **kwargs: Any) -> Any:
        counts.drains += 1
        return real_drain(*args, **kwargs)

    async def create_job(new: NewJob, *, now: float) -> Any:
        counts.creates += 1
        return await real_create(new, now=now)

    async def admit(want: Admission, *, now: float) -> Any:
        counts.admits += 1
        return await real_admit(want, now=now)

    monkeypatch.setattr(_submit, "new_job_id", new_job_id)
    monkeypatch.setattr(_submit, "_Drain", drain)
    monkeypatch.setattr(job_store, "create_job", create_job)
    monkeypatch.setattr(job_store, "admit", admit)
    return counts


#: The backends whose ``admit`` reads (PostgreSQL's answers None, see its docstring).
READING = pytest.mark.parametrize("job_store", ["sqlite-memory", "sqlite-file"], indirect=True)


@READING
async def test_a_refused_submit_builds_nothing(
    job_store: JobStore, built: Built, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        alices, _ = await runner.submit("alice", "user", urls("x/hang"))
        await runner.submit("bob", "user", urls("y/hang"))
        built.reset()
        with pytest.raises(CallerBusy) as busy_caller:
            await runner.submit("alice", "user", urls("other"))
        assert busy_caller.value.job_id == alices  # it names the job to wait for
        with pytest.raises(Busy):
            await runner.submit("carol", "user", urls("w"))
        with pytest.raises(TooManyTargets):
            await runner.submit("dave", "user", urls(*"abcde"))
        assert built == Built(admits=3)  # one read each: no id, no drain, no create
        assert len(await job_store.list_jobs(now=clock())) == 2


@READING
async def test_a_reuse_is_answered_by_the_admission_read(
    job_store: JobStore, built: Built, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a"))
        await runner.wait(job_id)
        built.reset()
        clock.advance(CONFIG.ttl - 1)  # reused whatever its status, while its lease lasts
        assert await runner.submit("alice", "user", urls("a")) == (job_id, True)
        assert built == Built(admits=1)
        clock.advance(1)  # the lease has lapsed: the same targets make a new job
        fresh, reused = await runner.submit("alice", "user", urls("a"))
        assert not reused and fresh != job_id
        await runner.wait(fresh)


async def test_arguments_are_checked_before_the_admission_read(
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


def _racing_admit(job_store: JobStore, rival: NewJob, clock: FakeClock) -> list[Any]:
    """Make ``job_store.admit`` answer as it read, then have ``rival`` created (as another
    runner would) before the submit's create: the read said "free", the insert must not."""
    real_admit = job_store.admit
    theirs: list[Any] = []

    async def admit(want: Admission, *, now: float) -> Any:
        answer = await real_admit(want, now=now)
        if answer is None and not theirs:
            theirs.append(await job_store.create_job(rival, now=clock()))
        return answer

    job_store.admit = admit  # type: ignore[method-assign]
    return theirs


def _rival(caller: str, targets: list[Target]) -> NewJob:
    return NewJob(
        caller, "user", targets, ttl=100, targets_per_job=4, jobs_per_caller=1, jobs_total=2,
        status=JobState.RUNNING,
    )  # fmt: skip


async def test_a_cap_taken_after_the_admission_read_refuses_the_create(
    job_store: JobStore, built: Built, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        alices, _ = await runner.submit("alice", "user", urls("x/hang"))
        theirs = _racing_admit(job_store, _rival("bob", urls("y/hang")), clock)
        built.reset()
        with pytest.raises(Busy) as refused:
            await runner.submit("carol", "user", urls("w"))
        assert theirs and built.creates == 2  # the rival's, then ours: refused under the lock
        frames = [frame for frame, _ in traceback.walk_tb(refused.value.__traceback__)]
        ours = [f.f_code.co_qualname for f in frames if "trio_batch" in f.f_code.co_filename]
        assert ours == ["Runner.submit"]
        assert {"drain", "request"}.isdisjoint(frames[-1].f_locals)
        assert set(runner._drains) == {alices}  # the drain built for carol's job is gone
        assert {j.caller for j in await job_store.list_jobs(now=clock())} == {"alice", "bob"}


async def test_the_same_job_created_after_the_admission_read_is_reused(
    job_store: JobStore, built: Built, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        theirs = _racing_admit(job_store, _rival("alice", urls("x/hang")), clock)
        job_id, reused = await runner.submit("alice", "user", urls("x/hang"))
        rival, _ = theirs[0]
        assert (job_id, reused) == (rival.id, True)
        assert built.creates == 2  # the rival's, then ours: reused under the lock
        assert job_id not in runner._drains  # the drain built for a job not created is gone
        assert [j.id for j in await job_store.list_jobs(now=clock())] == [job_id]


async def test_an_admitted_create_waits_for_no_second_pass(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # SQLite's fast path paces its calls over the loop's passes: the admission read waited for
    # its turn, so the create right after it runs in that turn (the read and the insert were
    # one call before, which waited once).
    store = SQLiteJobStore(Store.open(tmp_path / "jobs.db"), owns_store=True)
    try:
        async with open_runner(store, fetch, CONFIG, now=clock) as runner:
            budget = store._budget
            waits: list[float] = []
            real_wait = budget.wait_for_room

            async def wait_for_room(**kwargs: Any) -> None:
                waits.append(budget.used)
                await real_wait(**kwargs)

            budget.wait_for_room = wait_for_room  # type: ignore[method-assign]
            budget.seconds = 0.0  # every call past the first in a pass waits for the next
            budget.used = 1.0  # this pass is spent
            job_id, reused = await runner.submit("alice", "user", urls("a"))
            assert not reused and len(waits) == 1
            await runner.wait(job_id)
    finally:
        await store.aclose()
