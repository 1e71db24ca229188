"""Regression tests for defects found in review of the core.

Interleavings are forced with events, ``wait_all_tasks_blocked`` and, where a store call must
be caught half-way on the store thread, a wrapped ``Store`` method that parks that thread on a
``threading.Event`` that the test releases. No wall-clock thresholds.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_batch.store._rows
import trio_batch.store.sqlite._lock
from trio_batch import (
    BatchError,
    Config,
    Job,
    JobState,
    Result,
    Runner,
    SQLiteJobStore,
    Store,
    StoreError,
    TargetState,
    TargetStatus,
    open_runner,
)
from trio_batch.store import NewJob
from trio_batch.store.sqlite._fast_path import FAST_MAX_CONTENT, FAST_MAX_RESULTS
from trio_batch.store.sqlite._store import WouldBeSlow

from ..support.fakes import FakeClock, ScriptedFetch, urls

CONFIG = Config(ttl=100, targets_per_job=100, jobs_per_caller=1, jobs_total=3)


def _on_loop_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# ------------------------------------------------------------------------------------------
# 1. Calls after shutdown wait forever, uncancellably, on the stopped store thread.


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


# ------------------------------------------------------------------------------------------
# 2. A job is visible (and reusable) before its drain is registered: a cancel through the
#    reused id does not reach the drain, which then fetches a target after cancel() returned.


async def test_cancel_through_a_reused_id_before_the_drain_starts(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets = urls("t0", "t1")
    token = trio.lowlevel.current_trio_token()
    created = trio.Event()
    release = threading.Event()
    real_create = Store.create_job

    def create_job(self: Store, *args: Any, **kwargs: Any) -> tuple[Job, bool]:
        if _on_loop_thread() and not created.is_set():
            # The first job is created on the thread (the fast path may also have declined on
            # its own, if the store thread was busy at that moment).
            raise WouldBeSlow("the store thread holds the connection")
        answer = real_create(self, *args, **kwargs)
        if not _on_loop_thread():
            # Committed, but the submitting task has not been told yet.
            token.run_sync_soon(created.set)
            release.wait()
        return answer

    monkeypatch.setattr(Store, "create_job", create_job)
    first: list[tuple[str, bool]] = []
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        async with trio.open_nursery() as nursery:

            async def submit() -> None:
                first.append(await runner.submit("alice", "user", targets))

            nursery.start_soon(submit)
            await created.wait()
            try:
                # The same caller submits again (a retried request): the job is reused...
                job_id, reused = await runner.submit("alice", "user", targets)
                assert reused
                # ...and cancelled; cancel() says it worked, wait() says the drain stopped.
                assert await runner.cancel(job_id)
            finally:
                release.set()  # never leave the store thread parked, even on a failure
            waited = await runner.wait(job_id)
            assert waited is not None and waited.status == JobState.CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        assert first == [(job_id, False)]
        # Nothing may be fetched after cancel() returned True (and wait() returned).
        assert fetch.calls == []


# ------------------------------------------------------------------------------------------
# 3. The runner lock leaks its flock when writing the pid fails (a full disk).


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
        async with open_runner(store, fetch, CONFIG, now=clock) as runner:
            job_id, _ = await runner.submit("alice", "user", urls("a"))
            assert (await runner.wait(job_id)) is not None
        monkeypatch.undo()
        # Released: the next start works.
        async with open_runner(store, fetch, CONFIG, now=clock) as runner:
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
            async with open_runner(store, fetch, CONFIG, now=clock):
                pass  # pragma: no cover
        monkeypatch.undo()
        async with open_runner(store, fetch, CONFIG, now=clock):
            pass
    finally:
        store.close()


# ------------------------------------------------------------------------------------------
# 4. wait() during shutdown returns a job that is still "running".


async def test_wait_during_shutdown_returns_a_terminal_job(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = trio.lowlevel.current_trio_token()
    marking = trio.Event()
    release = threading.Event()
    real_mark = Store.mark_in_flight_failed

    def mark_in_flight_failed(self: Store, reason: str, now: float | None = None) -> int:
        if reason == "shutdown":
            token.run_sync_soon(marking.set)
            release.wait()
        return real_mark(self, reason, now)

    monkeypatch.setattr(Store, "mark_in_flight_failed", mark_in_flight_failed)
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


# ------------------------------------------------------------------------------------------
# 5. One job's unstorable Result fails the other jobs sharing its group commit.


class _EvilMeta(dict[str, Any]):
    """A dict that json.dumps cannot walk (its items() raises something not a ValueError)."""

    def items(self) -> Any:
        raise RuntimeError("no items for you")


async def test_an_unstorable_result_fails_only_its_own_target(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    evil, good = "https://example.test/evil", "https://example.test/good"
    fetch.custom[evil] = lambda: Result("x", _EvilMeta(a=1))
    (evil_started, evil_go), (good_started, good_go) = fetch.gate(evil), fetch.gate(good)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        bad_id, _ = await runner.submit("mallory", "user", urls("evil", "after"))
        good_id, _ = await runner.submit("alice", "user", urls("good"))
        await evil_started.wait()
        await good_started.wait()
        evil_go.set()
        good_go.set()  # both outcomes are ready at once: one group commit
        good_job = await runner.wait(good_id)
        await runner.wait(bad_id)
        bad_status = await runner.status(bad_id)
    assert good_job is not None
    assert (good_job.status, good_job.error) == (JobState.DONE, None)
    assert bad_status is not None
    bad_job, bad_targets = bad_status
    assert bad_targets[0].status == TargetState.FAILED  # a clear stored error on the target
    assert bad_job.status == JobState.PARTIAL  # and the job went on


# ------------------------------------------------------------------------------------------
# 6. A big meta is serialised and written on the event loop (only content is measured).


async def test_a_big_meta_is_not_written_on_the_event_loop(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_loop: list[bool] = []
    real_record = Store.record_outcomes

    def record_outcomes(self: Store, *args: Any, **kwargs: Any) -> Any:
        on_loop.append(_on_loop_thread())
        return real_record(self, *args, **kwargs)

    monkeypatch.setattr(Store, "record_outcomes", record_outcomes)
    url = "https://example.test/bigmeta"
    fetch.custom[url] = lambda: Result("small", {"blob": "y" * (16 * FAST_MAX_CONTENT)})
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("bigmeta"))
        job = await runner.wait(job_id)
    assert job is not None and job.status == JobState.DONE
    assert on_loop == [False]


# ------------------------------------------------------------------------------------------
# 7. status() can report two targets as running (a snapshot older than drain.in_flight).


async def test_status_never_reports_two_running_targets(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = trio.lowlevel.current_trio_token()
    snapshot_taken = trio.Event()
    release = threading.Event()
    real_get_status = Store.get_status

    def get_status(self: Store, *args: Any, **kwargs: Any) -> Any:
        answer = real_get_status(self, *args, **kwargs)
        if not _on_loop_thread():
            token.run_sync_soon(snapshot_taken.set)
            release.wait()
        return answer

    monkeypatch.setattr(Store, "get_status", get_status)
    big = "https://example.test/big"
    fetch.custom[big] = lambda: Result("z" * (FAST_MAX_RESULTS + 1))  # status goes to the thread
    started_b, go_b = fetch.gate("https://example.test/b")
    started_c, go_c = fetch.gate("https://example.test/c")
    statuses: list[tuple[Job, list[TargetStatus]] | None] = []
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("big", "b", "c"))
        await started_b.wait()
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                statuses.append(await runner.status(job_id))

            nursery.start_soon(read)
            await snapshot_taken.wait()  # the snapshot: big done, b running, c pending
            go_b.set()
            await started_c.wait()  # b stored, c in flight
            release.set()
        await runner.cancel(job_id)
        go_c.set()
    [status] = statuses
    assert status is not None
    running = [t.idx for t in status[1] if t.status == TargetState.RUNNING]
    assert len(running) <= 1, f"targets {running} all read as running"


# ------------------------------------------------------------------------------------------
# 8. Status reads decode results when first read; a read sent to the store thread because the
#    job's results are big must hand them back decoded, or the loop would decode them.


async def test_big_results_are_decoded_on_the_store_thread_small_ones_when_read(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded_on_loop: list[bool] = []
    real_decode = trio_batch.store._rows._decode_result

    def decode(text: str) -> Result:
        decoded_on_loop.append(_on_loop_thread())
        return real_decode(text)

    monkeypatch.setattr(trio_batch.store._rows, "_decode_result", decode)
    fetch.custom["https://example.test/big"] = lambda: Result("z" * (FAST_MAX_RESULTS + 1))
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        big_id, _ = await runner.submit("alice", "user", urls("big"))
        small_id, _ = await runner.submit("bob", "user", urls("small"))
        await runner.wait(big_id)
        await runner.wait(small_id)
        big = await runner.status(big_id)
        assert decoded_on_loop == [False]  # on the store thread, during the read
        assert big is not None and big[1][0].result == Result("z" * (FAST_MAX_RESULTS + 1))
        small = await runner.status(small_id)
        assert decoded_on_loop == [False]  # nothing more: the big one was decoded already
        assert small is not None and small[1][0].result is not None
        assert decoded_on_loop == [False, True]  # when read, on the loop: it is small
        assert small[1][0].result is not None
        assert decoded_on_loop == [False, True]  # once


# ------------------------------------------------------------------------------------------
# 9. Ctrl-C on the loop thread's fast path. Trio raises KeyboardInterrupt wherever unprotected
#    code runs; caught between BEGIN and the block that commits or rolls back, it left the
#    connection inside a transaction with its lock released, and every later write on that
#    connection went into a savepoint of it: never committed.


class _CtrlCAfter:
    """A sqlite3 connection that gets a Ctrl-C as ``statement`` returns: it calls the SIGINT
    handler in force (trio's, inside ``trio.run``) with the current frame, which is what the
    interpreter does with a real SIGINT at that point, without a signal that could reach the
    test process itself should trio's handler not be in place."""

    def __init__(self, conn: Any, statement: str) -> None:
        self._conn = conn
        self._statement = statement
        self.fired = False

    def execute(self, sql: str, *args: Any) -> Any:
        cursor = self._conn.execute(sql, *args)
        if sql == self._statement and not self.fired:
            self.fired = True
            handler = signal.getsignal(signal.SIGINT)
            assert callable(handler) and handler is not signal.default_int_handler  # trio's
            handler(signal.SIGINT, sys._getframe())
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.parametrize(
    ("statement", "call"),
    [
        ("BEGIN IMMEDIATE", "create_job"),  # a write transaction
        ("BEGIN", "get_status"),  # a read snapshot
    ],
)
def test_ctrl_c_during_a_fast_path_call_leaves_no_transaction_open(
    tmp_path: Path, statement: str, call: str
) -> None:
    store = Store.open(tmp_path / "jobs.db")
    job_store = SQLiteJobStore(store)
    existing, _ = store.create_job(
        NewJob(
            "bob", "user", urls("b"), ttl=100, targets_per_job=10, jobs_per_caller=5, jobs_total=5
        )
    )

    async def main() -> None:
        job_store._start()
        fast = job_store._fast
        assert fast is not None and fast is not store  # the loop's own connection
        fast.db.conn = _CtrlCAfter(fast.db.conn, statement)  # type: ignore[assignment]
        if call == "create_job":
            await job_store.create_job(
                NewJob(
                    "alice",
                    "user",
                    urls("a"),
                    ttl=100,
                    targets_per_job=10,
                    jobs_per_caller=5,
                    jobs_total=5,
                ),
                now=time.time(),
            )
        else:
            await job_store.get_status(existing.id, now=time.time())
        await trio.sleep_forever()  # a Ctrl-C held back until a checkpoint arrives here

    # trio catches Ctrl-C only where Python's default handler is in place; a process started
    # with SIGINT ignored (as a background job may be) has none, so install it for the test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            trio.run(main)
        fast = job_store._fast
        assert fast is not None
        proxy = fast.db.conn
        assert isinstance(proxy, _CtrlCAfter) and proxy.fired
        assert not proxy.in_transaction, "a transaction was left open"
        # The connection goes on committing what it writes.
        job, _ = fast.create_job(
            NewJob(
                "carol",
                "user",
                urls("c"),
                ttl=100,
                targets_per_job=10,
                jobs_per_caller=5,
                jobs_total=5,
            )
        )
        assert store.get_job(job.id) is not None, "a later write was never committed"
    finally:
        signal.signal(signal.SIGINT, previous)
        job_store._thread.stop()
        if job_store._fast is not None:
            job_store._fast.close()
        store.close()
