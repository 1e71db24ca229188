"""Target timeouts and the cancel grace, on trio's mock clock."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_batch import Config, JobState, Result, Store, Target, TargetState, open_runner

from ..support.fakes import FakeClock, ScriptedFetch, urls


async def test_a_fetch_past_target_timeout_fails_with_timeout_and_the_job_goes_on(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    config = Config(target_timeout=5)
    async with open_runner(store, fetch, config, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("x/hang", "b"))
        job = await runner.wait(job_id)
        status = await runner.status(job_id)
    assert job is not None and job.status == JobState.PARTIAL
    assert status is not None
    hung, after = status[1]
    assert (hung.status, hung.error) == (TargetState.FAILED, "timeout")
    assert hung.hint is not None and "target_timeout (5 s)" in hung.hint
    assert after.status == TargetState.DONE


async def test_a_fetch_within_target_timeout_is_not_cut(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    target = Target("https://example.test/slow")

    async def slow() -> Result:
        await trio.sleep(4)
        return Result("late but fine")

    async def fetch_slowly(t: Target) -> Result:
        return await slow()

    async with open_runner(store, fetch_slowly, Config(target_timeout=5), now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", [target])
        job = await runner.wait(job_id)
    assert job is not None and job.status == JobState.DONE


async def test_cancel_grace_cuts_a_hung_fetch_and_stores_it_as_cancelled(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    targets = urls("a", "hang", "c")
    hanging = trio.Event()
    cut_at: list[float] = []

    async def fetch(target: Target) -> Result:
        if target.url.endswith("hang"):
            hanging.set()
            try:
                await trio.sleep_forever()
            finally:
                cut_at.append(trio.current_time())  # when the grace ran out (then re-raised)
        return Result("ok")

    async with open_runner(store, fetch, Config(cancel_grace=2), now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await hanging.wait()
        cancelled_at = trio.current_time()
        assert await runner.cancel(job_id)
        job = await runner.wait(job_id)
        status = await runner.status(job_id)
    assert job is not None and job.status == JobState.CANCELLED
    # Virtual time: exactly the grace. (Measured inside the fetch: autojump_clock may move on
    # while later store calls run on the store thread.)
    assert cut_at == [pytest.approx(cancelled_at + 2)]
    assert status is not None
    assert [(t.status, t.error) for t in status[1]] == [
        (TargetState.DONE, None),
        (TargetState.FAILED, "cancelled"),
        (TargetState.PENDING, None),
    ]


async def test_a_fetch_finishing_within_the_grace_is_stored_as_it_returned(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, mock_clock: trio.testing.MockClock
) -> None:
    # A clock that moves only when told: autojump could leap past the grace while a store
    # call runs on the store thread.
    targets = urls("gate", "b")
    started, release = fetch.gate(targets[0].url)
    async with open_runner(store, fetch, Config(cancel_grace=10), now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        await runner.cancel(job_id)
        mock_clock.jump(9)  # still within the grace
        release.set()
        await runner.wait(job_id)
        status = await runner.status(job_id)
    assert status is not None
    assert [t.status for t in status[1]] == [TargetState.DONE, TargetState.PENDING]


async def test_without_a_grace_cancel_waits_for_the_fetch(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    targets = urls("gate", "b")
    started, release = fetch.gate(targets[0].url)
    async with open_runner(store, fetch, Config(), now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        await runner.cancel(job_id)
        with trio.move_on_after(3600):
            await runner.wait(job_id)
        status = await runner.status(job_id)
        assert status is not None and status[1][0].status == TargetState.RUNNING  # still going
        release.set()
        await runner.wait(job_id)
        status = await runner.status(job_id)
    assert status is not None and status[1][0].status == TargetState.DONE
