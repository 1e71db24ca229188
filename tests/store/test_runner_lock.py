"""One runner per database, in this process or another; readers keep working beside it."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_batch.store.sqlite._lock
from trio_batch import JobState, Store, StoreError, StoreLocked, open_runner

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


# ---------------------------------------------------------------------------------------------
# Found in review: the runner lock leaks its flock when writing the pid fails (a full disk).


class _DiskFullOs:
    """``os`` whose ``write`` fails as on a full disk."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def write(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


async def test_a_full_disk_while_taking_the_lock_does_not_leave_it_held(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path / "jobs.db")
    try:
        # The pid note in the lock file cannot be written: the lock (the flock) still works.
        monkeypatch.setattr(trio_batch.store.sqlite._lock, "os", _DiskFullOs())
        async with open_runner(store, fetch, now=clock) as runner:
            job_id, _ = await runner.submit("alice", "user", urls("a"))
            assert (await runner.wait(job_id)) is not None
        monkeypatch.undo()
        # Released: the next start works.
        async with open_runner(store, fetch, now=clock) as runner:
            job_id, _ = await runner.submit("alice", "user", urls("b"))
            job = await runner.wait(job_id)
        assert job is not None and job.status == JobState.DONE
    finally:
        store.close()


async def test_a_lock_file_that_cannot_be_created_is_a_store_error(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(tmp_path / "jobs.db")

    class NoCreateOs(_DiskFullOs):
        @staticmethod
        def open(path: str, flags: int, mode: int = 0o777) -> int:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))

    try:
        monkeypatch.setattr(trio_batch.store.sqlite._lock, "os", NoCreateOs())
        with pytest.raises(StoreError, match="runner lock file"):
            async with open_runner(store, fetch, now=clock):
                pass  # pragma: no cover
        monkeypatch.undo()
        async with open_runner(store, fetch, now=clock):
            pass
    finally:
        store.close()


async def test_a_lock_file_on_a_file_system_without_locks_is_a_store_error(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flock`` refused for another reason than "held" (ENOLCK, as NFS without a lock daemon
    answers) is a StoreError that says what to do, not a raw OSError; no descriptor leaks."""
    store = Store.open(tmp_path / "jobs.db")

    class NoLocksFcntl:
        def __getattr__(self, name: str) -> Any:
            return getattr(fcntl, name)

        @staticmethod
        def flock(fd: int, operation: int) -> None:
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    def open_fds() -> set[str]:
        return set(os.listdir("/proc/self/fd"))

    try:
        before = open_fds()
        monkeypatch.setattr(trio_batch.store.sqlite._lock, "fcntl", NoLocksFcntl())
        with pytest.raises(StoreError, match="cannot lock the runner lock file") as refused:
            async with open_runner(store, fetch, now=clock):
                pass  # pragma: no cover
        assert "local file system" in str(refused.value)
        assert not isinstance(refused.value, StoreLocked)
        monkeypatch.undo()
        assert open_fds() <= before
        async with open_runner(store, fetch, now=clock):  # nothing was left held
            pass
    finally:
        store.close()
