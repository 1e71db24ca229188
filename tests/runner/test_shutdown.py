"""Shutdown as the host sees it: calls after it answer at once, and ``wait()`` during it
returns the job as shutdown leaves it (terminal), never one still ``running``.

Interleavings are forced with events and ``wait_all_tasks_blocked``; where a store call must be
caught half-way on the store thread, a wrapped ``Store`` method parks that thread on a
``threading.Event`` that the test releases. No wall-clock thresholds.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from trio_batch import BatchError, Config, Job, JobState, Result, Runner, Store, Target, open_runner
from trio_batch.store import ReapedJob

from ..support.fakes import FakeClock, ScriptedFetch, urls

CONFIG = Config(ttl=100, targets_per_job=100, jobs_per_caller=1, jobs_total=3)


# ---------------------------------------------------------------------------------------------
# Found in review: calls after shutdown wait forever, uncancellably, on the stopped store thread.


async def _status(runner: Runner, job_id: str) -> object:
    return await runner.status(job_id)


async def _wait(runner: Runner, job_id: str) -> object:
    return await runner.wait(job_id)


async def _cancel(runner: Runner, job_id: str) -> object:
    return await runner.cancel(job_id)


async def _watch(runner: Runner, job_id: str) -> object:
    return [item async for item in runner.watch(job_id)]


@pytest.mark.parametrize("method", [_status, _wait, _cancel, _watch])
async def test_runner_calls_after_shutdown_answer_instead_of_hanging(
    store: Store,
    fetch: ScriptedFetch,
    clock: FakeClock,
    method: Callable[[Runner, str], Awaitable[object]],
) -> None:
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a"))
        await runner.wait(job_id)
    answers: list[object] = []
    give_up = trio.CancelScope()

    async def call() -> None:
        try:
            with give_up:
                answers.append(await method(runner, job_id))
        except BatchError as exc:  # RunnerClosed would be a fine answer too
            answers.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await trio.testing.wait_all_tasks_blocked()
        answered = bool(answers)
        # A host would give up with a cancel scope; that must end the call too.
        give_up.cancel()
    assert answered


# ---------------------------------------------------------------------------------------------
# Found in review: wait() during shutdown returns a job that is still "running".


async def test_wait_during_shutdown_returns_a_terminal_job(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = trio.lowlevel.current_trio_token()
    marking = trio.Event()
    release = threading.Event()
    real_fail = Store.fail_live

    def fail_live(self: Store, reason: str, now: float | None = None) -> list[ReapedJob]:
        if reason == "shutdown":
            token.run_sync_soon(marking.set)
            release.wait()
        return real_fail(self, reason, now)

    monkeypatch.setattr(Store, "fail_live", fail_live)
    answers: list[Job | None] = []
    async with trio.open_nursery() as host:

        async def waiter(runner: Runner, job_id: str) -> None:
            answers.append(await runner.wait(job_id))

        async def unblock_shutdown() -> None:
            await marking.wait()
            await trio.testing.wait_all_tasks_blocked()
            release.set()

        host.start_soon(unblock_shutdown)
        async with open_runner(store, fetch, CONFIG, now=clock) as runner:
            job_id, _ = await runner.submit("alice", "user", urls("x/hang"))
            await fetch.watch("https://example.test/x/hang").wait()
            host.start_soon(waiter, runner, job_id)
            await trio.testing.wait_all_tasks_blocked()
    [job] = answers
    assert job is not None
    assert job.is_terminal, f"wait() returned a {job.status} job"


# ---------------------------------------------------------------------------------------------
# A fetch with no checkpoint: a store call never raises Cancelled (it runs to completion), so
# a drain whose fetch never awaits anything had no place left where the shutdown could stop it.


async def test_shutdown_stops_a_drain_whose_fetch_never_checkpoints(
    tmp_path: Path, clock: FakeClock
) -> None:
    async def fetch(target: Target) -> Result:
        return Result(f"content of {target.url}", {})  # no await: never a checkpoint

    names = [f"t{i}" for i in range(100)]
    with Store.open(tmp_path / "jobs.db") as store:
        async with open_runner(store, fetch, CONFIG, now=clock) as runner:
            job_id, _ = await runner.submit("alice", "user", urls(*names))
            async for _ in runner.watch(job_id):
                break  # the first outcome is stored; shut down now
        job = store.get_job(job_id, now=clock())
    assert job is not None
    assert (job.status, job.error) == (JobState.FAILED, "shutdown")
    assert job.targets_done < len(names)  # the drain stopped; the rest stay pending
