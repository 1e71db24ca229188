"""One runner per database, in this process or another; readers keep working beside it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trio_batch import JobState, Store, StoreLocked, open_runner

from ..support.fakes import FakeClock, ScriptedFetch, urls

HOLDER = """
import sys, trio
from trio_batch import Result, Store, Target, open_runner

async def fetch(target):
    await trio.sleep_forever()

async def main():
    async with open_runner(Store.open(sys.argv[1]), fetch) as runner:
        await runner.submit("alice", "user", [Target("https://example.test/a")])
        print("running", flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


async def test_a_second_runner_in_the_same_process_is_refused(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    path = tmp_path / "jobs.db"
    async with open_runner(Store.open(path), fetch, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("x/hang"))
        with pytest.raises(StoreLocked, match="another runner"):
            async with open_runner(Store.open(path), fetch, now=clock):
                pass  # pragma: no cover
        # The refused runner reaped nothing.
        status = await runner.status(job_id)
        assert status is not None and status[0].status == JobState.RUNNING
    # Released on exit: the next runner starts.
    async with open_runner(Store.open(path), fetch, now=clock):
        pass


async def test_the_same_memory_store_takes_one_runner(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(store, fetch, now=clock):
        with pytest.raises(StoreLocked):
            async with open_runner(store, fetch, now=clock):
                pass  # pragma: no cover
    async with open_runner(store, fetch, now=clock):
        pass


def test_a_runner_in_another_process_holds_the_lock_until_it_dies(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "running"

        never = ScriptedFetch()  # records any fetch: the second runner must not start

        async def second_runner() -> None:
            async with open_runner(Store.open(path), never):
                pass  # pragma: no cover

        with pytest.raises(StoreLocked):
            trio.run(second_runner)
        assert never.calls == []
        # Read-only use beside the running runner works.
        with Store.open(path) as reader:
            [job] = reader.list_jobs()
            assert job.status == JobState.RUNNING
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()

    # SIGKILL left no lock behind: the next runner starts and reaps the job.
    async def restart() -> JobState:
        store = Store.open(path)
        async with open_runner(store, ScriptedFetch()) as runner:
            [job] = store.list_jobs()
            found = await runner.status(job.id)
            assert found is not None
            return found[0].status

    assert trio.run(restart) == JobState.FAILED
