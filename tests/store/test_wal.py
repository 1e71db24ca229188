"""The WAL stays bounded while the runner writes on the loop thread's fast path."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_batch import (
    CallerBusy,
    Config,
    Job,
    JobState,
    OutcomeWrite,
    Result,
    Store,
    StoreError,
    Target,
    open_runner,
)
from trio_batch.store import Admission, NewJob
from trio_batch.store.sqlite import _fast_path, _job_store, _paths

from ..support.fakes import T0 as NOW  # the time every call is made at: leases compare only with it

TTL = 3600.0
#: A checkpoint's steps: two copies (the loop writes beside them), then the restart.
STEPS = ["PASSIVE", "PASSIVE", "RESTART"]


def _one_target_job(caller: str) -> NewJob:
    return NewJob(
        caller,
        "user",
        [Target("u")],
        ttl=TTL,
        targets_per_job=1,
        jobs_per_caller=1,
        jobs_total=100,
        status=JobState.RUNNING,
    )


async def _fetch(target: Target) -> Result:
    return Result("x" * 1000)


async def test_the_wal_is_checkpointed_and_stays_bounded_under_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fast connection never checkpoints itself; the store thread must, often enough.
    monkeypatch.setattr(_paths, "CHECKPOINT_EVERY", 100)
    path = tmp_path / "jobs.db"
    store = Store.open(path)
    config = Config(targets_per_job=500, jobs_per_caller=8)
    async with open_runner(store, _fetch, config) as runner:
        for job in range(6):
            job_id, _ = await runner.submit(
                "a", "user", [Target(f"u{job}/{i}") for i in range(500)]
            )
            await runner.wait(job_id)
        wal = (await trio.Path(f"{path}-wal").stat()).st_size
    # 3,000 commits of several pages each would be tens of MB if the WAL were never reset.
    assert wal < 4 * 1024 * 1024, f"the WAL grew to {wal:,} bytes"


async def test_the_loop_writes_beside_a_checkpoints_copy_never_beside_its_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The copy takes no lock: the loop's writes go on beside it, on the fast connection (they
    # append to the WAL, which the copy reads). The restart waits for writers, so from the
    # moment it is due the loop makes no call on the fast connection: its calls go off the loop.
    monkeypatch.setattr(_paths, "CHECKPOINT_EVERY", 5)
    store = Store.open(tmp_path / "jobs.db")
    checkpoints: list[tuple[str, bool]] = []
    faces: list[_job_store.SQLiteJobStore] = []
    step: list[str] = []  # the step running on the store thread, if any
    loop_thread = threading.get_ident()
    on_loop_in_restart: list[str] = []
    real_checkpoint = Store.checkpoint

    def checkpoint(self: Store, mode: str = "TRUNCATE") -> None:
        # On the store thread: is the fast path marked busy for the whole checkpoint?
        checkpoints.append((mode, all(face._checkpoint_pending for face in faces)))
        step.append(mode)
        try:
            real_checkpoint(self, mode)
        finally:
            step.clear()

    def traced(sql: str) -> None:
        if step != ["RESTART"] or threading.get_ident() != loop_thread:
            return
        # A write let in before the restart was due may still be ending (its statements run
        # with the GIL released, and the restart waits for it); one begun since may not.
        fast = faces[0]._fast
        if sql.startswith("BEGIN") or fast is None or not fast.db.conn.in_transaction:
            on_loop_in_restart.append(sql)

    monkeypatch.setattr(Store, "checkpoint", checkpoint)
    async with open_runner(store, _fetch, Config(targets_per_job=200)) as runner:
        face = runner.store
        assert isinstance(face, _job_store.SQLiteJobStore)
        faces.append(face)
        job_id, _ = await runner.submit("a", "user", [Target(f"u/{i}") for i in range(200)])
        assert face._fast is not None
        face._fast.db.conn.set_trace_callback(traced)  # before the drain's first outcome
        job = await runner.wait(job_id)
    store.close()
    assert job is not None and job.targets_done == 200
    # How many depends on timing: the writes made while one runs count toward its own cap.
    assert len(checkpoints) >= 2 * len(STEPS)
    assert all(marked for _, marked in checkpoints), checkpoints
    assert [mode for mode, _ in checkpoints] == STEPS * (len(checkpoints) // len(STEPS))
    assert on_loop_in_restart == []


@pytest.mark.parametrize(("outcomes", "checkpoints"), [(8, 1), (7, 0)])
async def test_outcomes_sharing_a_commit_each_count_toward_the_next_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcomes: int, checkpoints: int
) -> None:
    # A shared commit writes a page or two per outcome: counted as one call, 8 jobs' commits
    # let the WAL grow several times as large between two checkpoints.
    monkeypatch.setattr(_paths, "CHECKPOINT_EVERY", 8)
    steps: list[str] = []
    real_checkpoint = Store.checkpoint

    def checkpoint(self: Store, mode: str = "TRUNCATE") -> None:
        steps.append(mode)
        real_checkpoint(self, mode)

    monkeypatch.setattr(Store, "checkpoint", checkpoint)
    store = Store.open(tmp_path / "jobs.db")
    jobs = [  # made on the Store itself: nothing counted toward a checkpoint yet
        store.create_job(_one_target_job(f"c{i}"), now=NOW)[0] for i in range(outcomes)
    ]
    face = _job_store.SQLiteJobStore(store, owns_store=True)
    commits: list[str] = []
    async with face:
        await face.get_job(jobs[0].id, now=NOW)  # starts the store: a read counts nothing
        assert face._fast is not None
        face._fast.db.conn.set_trace_callback(
            lambda sql: commits.append(sql) if sql == "COMMIT" else None
        )
        async with trio.open_nursery() as nursery:
            for job in jobs:  # all ready in the same pass: one shared commit
                write = OutcomeWrite(job.id, 0, result=Result("x"), seen=job)
                nursery.start_soon(partial(face.record_outcome, write, ttl=TTL, now=NOW))
        await face.counts(now=NOW)  # on the store thread, after a checkpoint queued there
    assert len(commits) == 1
    assert steps == STEPS * checkpoints


class _HeldCheckpoint:
    """Holds the first checkpoint's ``step`` (PASSIVE or RESTART) on the store thread until
    released, and notes whether it was released (not given up on after ``GIVE_UP`` seconds,
    which guards against a hang: the test then fails, it does not wait on)."""

    GIVE_UP = 30.0

    def __init__(self, step: str) -> None:
        self.step = step
        self.holding = threading.Event()
        self.release = threading.Event()
        self.released: bool | None = None
        self.steps: list[str] = []
        self._real = Store.checkpoint

    def checkpoint(self, store: Store, mode: str = "TRUNCATE") -> None:
        """Stands in for :meth:`Store.checkpoint`."""
        self.steps.append(mode)
        if mode == self.step and self.released is None:
            self.holding.set()
            self.released = self.release.wait(self.GIVE_UP)
        self._real(store, mode)


async def _store_with_a_held_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: _HeldCheckpoint, *, every: int = 1000
) -> tuple[_job_store.SQLiteJobStore, str, list[int]]:
    """A store whose first call (a job's creation) starts a checkpoint, which is then held;
    and the threads each statement on the fast connection runs on from then on. From then on
    ``CHECKPOINT_EVERY`` is ``every`` (the side thread makes up to half as many calls)."""
    monkeypatch.setattr(_paths, "CHECKPOINT_EVERY", 1)

    def checkpoint(store: Store, mode: str = "TRUNCATE") -> None:
        held.checkpoint(store, mode)

    monkeypatch.setattr(Store, "checkpoint", checkpoint)
    store = _job_store.SQLiteJobStore(Store.open(tmp_path / "jobs.db"), owns_store=True)
    job, _ = await store.create_job(
        NewJob(
            "alice",
            "user",
            [Target("u/0"), Target("u/1")],
            ttl=TTL,
            targets_per_job=10,
            jobs_per_caller=10,
            jobs_total=10,
        ),
        now=NOW,
    )
    await trio.to_thread.run_sync(held.holding.wait)
    monkeypatch.setattr(_paths, "CHECKPOINT_EVERY", every)
    threads: list[int] = []
    assert store._fast is not None
    store._fast.db.conn.set_trace_callback(lambda _: threads.append(threading.get_ident()))
    return store, job.id, threads


async def test_outcomes_and_reads_go_on_while_a_checkpoint_copies_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy step takes no lock: while it runs, the loop's calls go on beside it, on the
    fast connection and on the loop, instead of waiting for the whole checkpoint (a serial
    drain stood still meanwhile), or for a side thread's answer (a third of the loop's pace)."""
    held = _HeldCheckpoint("PASSIVE")
    store, job_id, threads = await _store_with_a_held_checkpoint(tmp_path, monkeypatch, held)
    async with store:
        job = await store.record_outcome(
            OutcomeWrite(job_id, 0, result=Result("a")), ttl=TTL, now=NOW
        )
        status = await store.get_status(job_id, now=NOW)
        answered_while_held = held.released is None
        held.release.set()
    assert answered_while_held
    assert held.released is True
    assert job is not None and job.targets_done == 1
    assert status is not None and status[1][0].result == Result("a")
    assert threads, "the fast connection answered nothing"
    assert set(threads) == {threading.get_ident()}  # on the loop
    assert held.steps == STEPS


async def test_reads_beside_a_checkpoints_copy_stay_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read writes nothing beside the copy's disk flushes: an admission (here refused) and a
    status read run on the loop, on a connection no thread uses, instead of queueing on the
    side thread, whose answers came back to the loop in bursts under load."""
    held = _HeldCheckpoint("PASSIVE")
    store, job_id, threads = await _store_with_a_held_checkpoint(tmp_path, monkeypatch, held)
    on_reader: list[int] = []
    async with store:
        assert store._reader is not None
        store._reader.db.conn.set_trace_callback(lambda _: on_reader.append(threading.get_ident()))
        with pytest.raises(CallerBusy) as refused:  # alice's job is live, and her cap is 1
            await store.admit(Admission("alice", "other targets", 1, 10, 1, 10), now=NOW)
        status = await store.get_status(job_id, now=NOW)
        answered_while_held = held.released is None
        held.release.set()
    assert answered_while_held
    assert refused.value.job_id == job_id
    assert status is not None and status[0].id == job_id
    assert on_reader and set(on_reader) == {threading.get_ident()}  # on the loop
    assert threads == []  # nothing on the fast connection, the side thread's


async def test_reads_beside_a_checkpoints_restart_stay_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read writes nothing, and the restart waits only for readers of the WAL's old frames:
    an admission (here refused) and a status read made while it is due run on the loop, on
    the reader connection. (Queued behind the restart on the store thread, such reads came
    back in one burst of the scheduler: under the soak load, passes of 60 refusals, 7-9 ms.)"""
    held = _HeldCheckpoint("RESTART")
    store, job_id, threads = await _store_with_a_held_checkpoint(tmp_path, monkeypatch, held)
    on_reader: list[int] = []
    async with store:
        assert store._reader is not None
        store._reader.db.conn.set_trace_callback(lambda _: on_reader.append(threading.get_ident()))
        with pytest.raises(CallerBusy) as refused:  # alice's job is live, and her cap is 1
            await store.admit(Admission("alice", "other targets", 1, 10, 1, 10), now=NOW)
        status = await store.get_status(job_id, now=NOW)
        answered_while_held = held.released is None
        held.release.set()
    assert answered_while_held
    assert held.released is True
    assert refused.value.job_id == job_id
    assert status is not None and status[0].id == job_id
    assert on_reader and set(on_reader) == {threading.get_ident()}  # on the loop
    assert threads == []  # nothing on the fast connection
    assert held.steps == STEPS


async def test_the_wal_restarts_at_every_checkpoint_with_reads_on_the_loop_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads on the loop beside a real ``RESTART`` never keep it from restarting the WAL: each
    read ends before the loop goes on, and one begun after the copy reads the database file
    only. (A restart kept busy by readers would leave the WAL to grow without end.)"""
    monkeypatch.setattr(_paths, "CHECKPOINT_EVERY", 50)
    restarts: list[tuple[int, int, int]] = []
    restarting = threading.Event()
    read_beside = threading.Event()

    def checkpoint(self: Store, mode: str = "TRUNCATE") -> None:
        # The real pragma, its answer kept: (busy, frames in the WAL, frames copied).
        if mode == "RESTART":
            restarting.set()
            # Until a read has run beside one, each waits for one: the test tests something.
            read_beside.wait(5)
        try:
            with self._locked():
                row = self.db.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        finally:
            restarting.clear()
        if mode == "RESTART":
            restarts.append(tuple(row))

    monkeypatch.setattr(Store, "checkpoint", checkpoint)
    path = tmp_path / "jobs.db"
    store = Store.open(path)
    reads_beside_a_restart: list[str] = []
    faces: list[_job_store.SQLiteJobStore] = []

    def traced(sql: str) -> None:  # on the loop: the restart step is due (the copy is over)
        face = faces[0]
        if restarting.is_set() and face._checkpoint_pending and not face._checkpoint_copying:
            reads_beside_a_restart.append(sql)
            read_beside.set()

    async with open_runner(store, _fetch, Config(targets_per_job=400)) as runner:
        face = runner.store
        assert isinstance(face, _job_store.SQLiteJobStore)
        faces.append(face)
        job_id, _ = await runner.submit("a", "user", [Target(f"u/{i}") for i in range(400)])
        assert face._reader is not None  # the submit opened the store and its reader
        face._reader.db.conn.set_trace_callback(traced)

        async def read_until_done() -> None:
            while True:
                status = await runner.status(job_id)
                if status is None or status[0].is_terminal:
                    return

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(read_until_done)
        job = await runner.wait(job_id)
        wal = (await trio.Path(f"{path}-wal").stat()).st_size
    store.close()
    assert job is not None and job.targets_done == 400
    assert len(restarts) >= 3
    assert all(busy == 0 for busy, _, _ in restarts), restarts
    assert reads_beside_a_restart, "no read ran beside a restart: the test tested nothing"
    assert wal < 4 * 1024 * 1024, f"the WAL grew to {wal:,} bytes"


async def _store_outcome(
    store: _job_store.SQLiteJobStore, job_id: str, idx: int, answers: list[Job | None]
) -> None:
    """Store target ``idx``'s outcome; its answer goes to ``answers``."""
    write = OutcomeWrite(job_id, idx, result=Result("a"))
    answers.append(await store.record_outcome(write, ttl=TTL, now=NOW))


async def test_writes_beside_one_copy_are_capped_so_the_wal_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However long the copy takes (a slow disk), the loop and the side thread together make
    at most CHECKPOINT_EVERY // 2 writes beside it; later ones wait for the checkpoint, so the
    WAL holds at most 1.5 x CHECKPOINT_EVERY writes when it restarts. Reads write nothing: they
    go on beside it. (Uncapped, the WAL of a test writing through slow checkpoints grew past
    its bound.)"""
    held = _HeldCheckpoint("PASSIVE")
    store, job_id, threads = await _store_with_a_held_checkpoint(
        tmp_path, monkeypatch, held, every=2
    )
    async with store, trio.open_nursery() as nursery:
        answers: list[Job | None] = []
        await _store_outcome(store, job_id, 0, answers)  # the one write allowed beside it
        for _ in range(3):  # and reads, past the cap
            assert await store.get_job(job_id, now=NOW) is not None
        assert threads and set(threads) == {threading.get_ident()}  # on the loop
        answered_while_held = held.released is None
        beside = len(threads)
        nursery.start_soon(_store_outcome, store, job_id, 1, answers)
        await trio.testing.wait_all_tasks_blocked()
        await store._side_thread.run(lambda: None)  # after whatever the side thread was given
        second_ran_beside = len(threads) > beside
        held.release.set()
    assert answered_while_held
    assert not second_ran_beside  # it waited for the checkpoint, on the store thread
    assert held.released is True
    assert answers[1] is not None and answers[1].targets_done == 2
    assert len(threads) == beside


async def test_a_shared_commit_bigger_than_the_cap_waits_for_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap counts a shared commit's outcomes, not the commit: 3 outcomes in one commit
    are past a cap of 2 writes beside the copy, so they wait for the checkpoint."""
    held = _HeldCheckpoint("PASSIVE")
    store, job_id, threads = await _store_with_a_held_checkpoint(
        tmp_path, monkeypatch, held, every=4
    )
    others = [  # made on the Store itself: nothing counted
        store.store.create_job(_one_target_job(f"c{i}"), now=NOW)[0].id for i in range(2)
    ]
    async with store, trio.open_nursery() as nursery:
        answers: list[Job | None] = []
        for job in (job_id, *others):  # ready in the same pass: one commit of 3
            nursery.start_soon(_store_outcome, store, job, 0, answers)
        await trio.testing.wait_all_tasks_blocked()
        await store._side_thread.run(lambda: None)  # after whatever the side thread was given
        ran_beside = bool(threads)
        held.release.set()
    assert not ran_beside  # the whole commit waited for the checkpoint, on the store thread
    assert held.released is True
    assert len(answers) == 3 and all(job is not None for job in answers)


async def test_no_call_uses_the_fast_connection_while_a_checkpoint_restarts_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart step waits for writers: from the moment it is due, calls queue behind it on
    the store thread, and the fast connection (loop or side thread) makes none."""
    held = _HeldCheckpoint("RESTART")
    store, job_id, threads = await _store_with_a_held_checkpoint(tmp_path, monkeypatch, held)
    async with store, trio.open_nursery() as nursery:
        answers: list[Job | None] = []
        nursery.start_soon(_store_outcome, store, job_id, 0, answers)
        await trio.testing.wait_all_tasks_blocked()
        assert answers == []  # queued behind the restart
        held.release.set()
    assert held.released is True
    job = answers[0]
    assert job is not None and job.targets_done == 1
    assert threads == []


async def test_calls_beside_a_checkpoint_when_the_store_closes_get_the_closed_stores_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aclose while the side thread is busy with one call and has another queued: both get
    the closed store's StoreError (not a closed connection's error, nor a stopped thread's),
    the fast connection closes after them, and aclose returns once the checkpoint ends."""
    held = _HeldCheckpoint("PASSIVE")
    store, job_id, _ = await _store_with_a_held_checkpoint(tmp_path, monkeypatch, held)
    side_busy = threading.Event()
    release_side = threading.Event()
    real_beside = _job_store.SQLiteJobStore._fast_beside_checkpoint

    def beside(self: _job_store.SQLiteJobStore, *args: Any) -> Any:
        if not side_busy.is_set():  # hold the first call, so the next one queues behind it
            side_busy.set()
            release_side.wait(_HeldCheckpoint.GIVE_UP)
        return real_beside(self, *args)

    monkeypatch.setattr(_job_store.SQLiteJobStore, "_fast_beside_checkpoint", beside)
    outcomes: list[BaseException | object] = []

    async def call(make: Callable[[], Awaitable[object]]) -> None:
        try:
            outcomes.append(await make())
        except Exception as exc:
            outcomes.append(exc)

    async with trio.open_nursery() as nursery:
        # Results too big for the loop: the copy's writes the loop declines (a small write, or
        # a read, would run on the loop beside the copy).
        big = Result("a" * (_fast_path.FAST_MAX_CONTENT + 1))
        nursery.start_soon(
            call,
            lambda: store.record_outcome(OutcomeWrite(job_id, 0, result=big), ttl=TTL, now=NOW),
        )
        await trio.to_thread.run_sync(side_busy.wait)
        nursery.start_soon(
            call,
            lambda: store.record_outcome(OutcomeWrite(job_id, 1, result=big), ttl=TTL, now=NOW),
        )
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(store.aclose)
        await trio.testing.wait_all_tasks_blocked()
        release_side.set()
        held.release.set()
    assert len(outcomes) == 2
    for outcome in outcomes:
        assert type(outcome) is StoreError, outcomes
        assert "is closed" in str(outcome)
    assert held.released is True
    with pytest.raises(StoreError, match="is closed"):
        await store.get_job(job_id, now=NOW)
