"""Restarts: a runner killed with SIGKILL mid-drain leaves a database the next one can reap."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import trio

from trio_batch import JobState, Result, Store, TargetState, open_runner

from ..support.fakes import ScriptedFetch

CHILD = """
import sys, trio
from trio_batch import Result, Store, Target, open_runner

async def fetch(target):
    if target.url.endswith("/2"):
        print("hanging", flush=True)
        await trio.sleep_forever()
    return Result("ok " + target.url)

async def main():
    store = Store.open(sys.argv[1])
    async with open_runner(store, fetch) as runner:
        job_id, _ = await runner.submit(
            "alice", "user", [Target(f"https://example.test/{i}") for i in range(5)]
        )
        print(job_id, flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


def test_a_job_killed_mid_drain_is_failed_on_restart_and_its_work_kept(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        job_id = child.stdout.readline().strip()
        # "hanging" is printed while target 2 is fetched, so targets 0 and 1 are committed.
        assert child.stdout.readline().strip() == "hanging"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL

    with Store.open(path) as store:
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        left = store.get_status(job_id)
        assert left is not None
        assert left[0].status == JobState.RUNNING  # as the dead process left it
        assert [t.status for t in left[1]][:3] == ["done", "done", "running"]

        never = ScriptedFetch()  # records any fetch: a reaped job must not be resumed

        async def restart() -> None:
            async with open_runner(store, never) as runner:
                status = await runner.status(job_id)
                assert status is not None
                job, targets = status
                assert (job.status, job.error) == (JobState.FAILED, "restart")
                assert job.targets_done == 2
                assert [t.status for t in targets] == [
                    TargetState.DONE,
                    TargetState.DONE,
                    TargetState.PENDING,
                    TargetState.PENDING,
                    TargetState.PENDING,
                ]
                assert targets[1].result == Result("ok https://example.test/1")

        trio.run(restart)
        assert never.calls == []
