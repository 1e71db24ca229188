"""A submit cancelled while its job is being created: the job is created and drained, and the
``Cancelled`` comes at the caller's next checkpoint (the store's create cannot be abandoned)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

from trio_batch import Config, JobState, Store, Target, open_runner

from ..support.fakes import FakeClock, ScriptedFetch

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=1, jobs_total=8)


async def test_a_submit_cancelled_while_its_job_is_created_still_starts_its_drain(
    store: Store, clock: FakeClock, fetch: ScriptedFetch, monkeypatch: pytest.MonkeyPatch
) -> None:
    creating, go_on = trio.Event(), threading.Event()
    token = trio.lowlevel.current_trio_token()
    real_create = Store.create_job

    def create_once_cancelled(self: Store, *args: Any, **kw: Any) -> Any:
        trio.from_thread.run_sync(creating.set, trio_token=token)
        go_on.wait(30)  # until the submit is cancelled (bounded, should the test fail first)
        return real_create(self, *args, **kw)

    monkeypatch.setattr(Store, "create_job", create_once_cancelled)
    scope = trio.CancelScope()
    answers: list[object] = []

    async def submit() -> None:
        with scope:
            answers.append(await runner.submit("alice", "user", [Target("https://x/1")]))
            await trio.lowlevel.checkpoint()
            answers.append("not cancelled")

    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit)
            await creating.wait()
            scope.cancel()
            go_on.set()
        assert scope.cancelled_caught
        [(job_id, reused)] = answers  # the submit answered; its next checkpoint was cancelled
        assert not reused
        job = await runner.wait(job_id)
    assert job is not None and job.status is JobState.DONE
    assert fetch.calls == ["https://x/1"]
