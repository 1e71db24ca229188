"""Submits are paced over the passes of trio's scheduler: a crowd of them arriving at once (a
thousand clients, or refused callers retrying together) has its checks run a few per pass,
not all in one pass that stalls every task beside it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import trio

from trio_batch import Config, Store, Target, open_runner
from trio_batch.runner import _runner

from ..support.fakes import FakeClock, PassCounter, ScriptedFetch

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=1, jobs_total=64)


@dataclass
class PassRecordingFetch(ScriptedFetch):
    """Records the scheduler pass in which each submitted target was checked."""

    counter: PassCounter = field(default_factory=PassCounter)
    checked_in_pass: list[int] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    def check_target(self, target: Target) -> None:
        self.checked_in_pass.append(self.counter.passes)
        self.checked.append(target.url)


@pytest.fixture
def one_submit_per_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass budget of nothing: the first submit of a pass runs, the next waits."""
    monkeypatch.setattr(_runner, "SUBMIT_PASS_BUDGET", 0.0)


@pytest.mark.usefixtures("one_submit_per_pass")
async def test_submits_arriving_together_are_checked_over_several_passes(
    store: Store, clock: FakeClock
) -> None:
    fetch = PassRecordingFetch()
    trio.lowlevel.add_instrument(fetch.counter)
    arrived: list[str] = []

    async def submit(i: int) -> None:
        arrived.append(f"https://x/{i}")
        await runner.submit(f"caller{i}", "user", [Target(f"https://x/{i}")])

    async with open_runner(store, fetch, CONFIG, now=clock) as runner, trio.open_nursery() as n:
        for i in range(20):
            n.start_soon(submit, i)
    assert len(set(fetch.checked_in_pass)) == 20  # one a pass
    assert fetch.checked == arrived  # in the order the submits came
    assert len(store.list_jobs(now=clock())) == 20


@pytest.mark.usefixtures("one_submit_per_pass")
async def test_a_submit_cancelled_while_it_waits_for_its_turn_creates_nothing(
    store: Store, clock: FakeClock
) -> None:
    fetch = PassRecordingFetch()
    trio.lowlevel.add_instrument(fetch.counter)
    scopes = [trio.CancelScope() for _ in range(6)]
    created: list[str] = []

    async def submit(i: int) -> None:
        with scopes[i]:
            job_id, _ = await runner.submit(f"caller{i}", "user", [Target(f"https://x/{i}")])
            created.append(job_id)

    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(submit, i)
            started = fetch.counter.passes
            while fetch.counter.passes < started + 2:  # every submit has run once, at least
                await trio.lowlevel.checkpoint()
            waiting = [i for i in range(6) if f"https://x/{i}" not in fetch.checked]
            assert waiting  # the others wait for their turn, a pass each
            for i in waiting:
                scopes[i].cancel()
        for job_id in created:
            await runner.wait(job_id)
    went_on = sorted(set(range(6)) - set(waiting))
    assert all(scopes[i].cancelled_caught for i in waiting)
    assert sorted(fetch.checked) == [f"https://x/{i}" for i in went_on]
    assert sorted(job.caller for job in store.list_jobs(now=clock())) == [
        f"caller{i}" for i in went_on
    ]
