"""The SQLite fast path spreads its loop-thread work over passes of trio's scheduler.

trio checks timers and sockets only between passes, so store calls piled into one pass delay
them all; past ``FAST_PASS_BUDGET`` a call waits for a later pass. Passes are counted with an
instrument (trio waits for I/O once per pass), never with a wall clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path

import pytest
import trio

from trio_batch import (
    Config,
    JobState,
    OutcomeWrite,
    Result,
    Store,
    StoreError,
    Target,
    open_runner,
)
from trio_batch._loop_budget import MAX_DEFERRALS
from trio_batch.store import NewJob
from trio_batch.store.sqlite import SQLiteJobStore, _fast_path, _paths

from ..support.fakes import PassCounter

CALLERS = 6
#: The time every call is made at: leases compare only with it. (Not trio.current_time(): each
#: trio run's clock has its own random offset, so a lease taken in one run could have lapsed in
#: the next.)
NOW = 1e9


async def _job_in(store: SQLiteJobStore) -> str:
    job, _ = await store.create_job(
        NewJob(
            "alice",
            "user",
            [Target("https://example.test/a")],
            ttl=3600,
            targets_per_job=10,
            jobs_per_caller=10,
            jobs_total=10,
        ),
        now=NOW,
    )
    return job.id


async def _passes_of_concurrent_reads(store: SQLiteJobStore, job_id: str) -> set[int]:
    """The passes in which CALLERS reads, started together, came back."""
    counter = PassCounter()
    trio.lowlevel.add_instrument(counter)
    returned: set[int] = set()

    async def read() -> None:
        job = await store.get_job(job_id, now=NOW)
        assert job is not None
        returned.add(counter.passes)

    try:
        async with trio.open_nursery() as nursery:
            for _ in range(CALLERS):
                nursery.start_soon(read)
    finally:
        trio.lowlevel.remove_instrument(counter)
    return returned


@pytest.mark.parametrize(
    ("budget", "passes"),
    [
        (0.0, CALLERS),  # one call spends a pass's budget: six calls come back in six passes
        (60.0, 1),  # within the budget, calls started together share a pass
    ],
    ids=["past the budget", "within it"],
)
async def test_fast_path_calls_past_the_budget_wait_for_later_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: float, passes: int
) -> None:
    monkeypatch.setattr(_paths, "FAST_PASS_BUDGET", budget)
    async with SQLiteJobStore(Store.open(tmp_path / "jobs.db"), owns_store=True) as store:
        job_id = await _job_in(store)
        assert len(await _passes_of_concurrent_reads(store, job_id)) == passes


def test_calls_from_another_trio_run_are_never_held_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The budget is refilled only in the run it was installed in: anywhere else it must not
    # hold calls back, or they would wait for passes that never refill it.
    monkeypatch.setattr(_paths, "FAST_PASS_BUDGET", 0.0)
    store = SQLiteJobStore(Store.open(tmp_path / "jobs.db"), owns_store=True)
    job_id = trio.run(_job_in, store)  # installs the budget in this first run
    try:
        assert len(trio.run(_passes_of_concurrent_reads, store, job_id)) == 1
    finally:
        trio.run(store.aclose)


def test_a_serial_drain_in_another_trio_run_still_lets_a_cancel_in_between_targets(
    tmp_path: Path,
) -> None:
    # A drain alone skips the group commit's gathering yield, counting on the budget to end
    # the pass; the budget cannot in a run it does not guard. There each fast-path outcome
    # write must still yield, or a fetch that never yields would hold the loop for the whole
    # job: no cancel, no timer, no socket until it ends.
    store = SQLiteJobStore(Store.open(tmp_path / "jobs.db"), owns_store=True)
    trio.run(partial(store.list_jobs, now=NOW))  # installs the budget in this first run
    targets = [Target(f"https://example.test/{i}") for i in range(100)]

    async def drain_and_cancel() -> JobState:
        second_fetched = trio.Event()
        fetched = 0

        async def fetch(target: Target) -> Result:  # never yields
            nonlocal fetched
            fetched += 1
            if fetched == 2:
                second_fetched.set()
            return Result("x")

        async with open_runner(store, fetch, Config(targets_per_job=len(targets))) as runner:
            job_id, _ = await runner.submit("alice", "user", targets)
            await second_fetched.wait()
            assert await runner.cancel(job_id), "the job ran to its end before the cancel"
            job = await runner.wait(job_id)
        assert job is not None and job.targets_done < len(targets)
        return job.status

    try:
        assert trio.run(drain_and_cancel) is JobState.CANCELLED
    finally:
        trio.run(store.aclose)


async def test_a_call_waiting_for_room_still_runs_when_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_paths, "FAST_PASS_BUDGET", 0.0)
    async with SQLiteJobStore(Store.open(tmp_path / "jobs.db"), owns_store=True) as store:
        job_id = await _job_in(store)
        counter = PassCounter()
        trio.lowlevel.add_instrument(counter)
        with trio.CancelScope() as scope:
            scope.cancel()
            store._budget.used = 1.0  # this pass's budget is spent
            before = counter.passes
            job = await store.get_job(job_id, now=NOW)
            waited = counter.passes - before
            await trio.lowlevel.checkpoint()  # the cancel arrives here
        trio.lowlevel.remove_instrument(counter)
        assert job is not None and job.id == job_id
        assert waited >= 2  # a pass waiting for room, and the yield after the call
        assert scope.cancelled_caught


async def _passes_of(call: Awaitable[object]) -> int:
    """The passes of trio's scheduler ``call`` took to come back."""
    counter = PassCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        await call
    finally:
        trio.lowlevel.remove_instrument(counter)
    return counter.passes


@pytest.fixture
async def never_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[SQLiteJobStore, str]]:
    """A store and a job in it, where every pass is spent before it starts: room never comes."""
    monkeypatch.setattr(_paths, "FAST_PASS_BUDGET", -1.0)
    async with SQLiteJobStore(Store.open(tmp_path / "jobs.db"), owns_store=True) as store:
        yield store, await _job_in(store)


async def test_a_call_waits_for_room_at_most_max_deferrals_passes(
    never_room: tuple[SQLiteJobStore, str],
) -> None:
    # The call runs anyway once it has waited MAX_DEFERRALS passes (then it yields once more,
    # as every call does).
    store, job_id = never_room
    assert await _passes_of(store.get_job(job_id, now=NOW)) == MAX_DEFERRALS + 1


async def test_an_outcome_batch_for_the_store_thread_does_not_wait_for_room(
    never_room: tuple[SQLiteJobStore, str],
) -> None:
    # A result too big for the fast path is written on the store thread, off the loop: waiting
    # for room first would only delay its commit (and the followers in its batch).
    store, job_id = never_room
    big = Result("x" * (_fast_path.FAST_MAX_CONTENT + 1))
    write = store.record_outcome(OutcomeWrite(job_id, 0, result=big), ttl=3600, now=NOW)
    assert await _passes_of(write) < MAX_DEFERRALS


_CALLS_THAT_WAIT_FOR_ROOM: dict[str, Callable[[SQLiteJobStore, str], Awaitable[object]]] = {
    "get_job": lambda store, job_id: store.get_job(job_id, now=NOW),
    "get_status": lambda store, job_id: store.get_status(job_id, now=NOW),
    "finish_job": lambda store, job_id: store.finish_job(job_id, JobState.CANCELLED, now=NOW),
    "record_outcome": lambda store, job_id: store.record_outcome(
        OutcomeWrite(job_id, 0, result=Result("x")), ttl=3600, now=NOW
    ),
}


async def _make_the_call(
    call: str, store: SQLiteJobStore, job_id: str, errors: list[Exception]
) -> None:
    """Make ``call``; an error it raises goes to ``errors``."""
    try:
        await _CALLS_THAT_WAIT_FOR_ROOM[call](store, job_id)
    except Exception as exc:
        errors.append(exc)


@pytest.mark.parametrize("owns_store", [False, True], ids=["borrowed", "owned"])
@pytest.mark.parametrize("call", _CALLS_THAT_WAIT_FOR_ROOM)
async def test_a_call_waiting_for_room_when_the_store_closes_gets_the_closed_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, owns_store: bool
) -> None:
    # Every pass is spent before it starts, so each call waits its full MAX_DEFERRALS passes:
    # the store is closed while it waits. It must get the store's own "closed" error, as a
    # call made after the close does, not the stopped thread's or the closed database's.
    monkeypatch.setattr(_paths, "FAST_PASS_BUDGET", -1.0)
    sqlite = Store.open(tmp_path / "jobs.db")
    store = SQLiteJobStore(sqlite, owns_store=owns_store)
    job_id = await _job_in(store)
    errors: list[Exception] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_make_the_call, call, store, job_id, errors)
        for _ in range(2):  # the call begins, and waits for room
            await trio.lowlevel.cancel_shielded_checkpoint()
        await store.aclose()
    if not owns_store:
        sqlite.close()
    assert len(errors) == 1
    assert type(errors[0]) is StoreError, repr(errors[0])
    assert "is closed" in str(errors[0])


async def test_an_outcome_write_whose_leader_yields_past_the_close_gets_the_closed_store_error(
    tmp_path: Path,
) -> None:
    # The group commit's leader yields once to gather its batch, with room in the pass or not.
    # Whether the close runs in that yield or before the write began is up to trio's scheduler
    # (it reverses half its passes), so the race is run often enough to meet both orders.
    for attempt in range(24):
        sqlite = Store.open(tmp_path / f"jobs{attempt}.db")
        store = SQLiteJobStore(sqlite)
        job_id = await _job_in(store)
        errors: list[Exception] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_make_the_call, "record_outcome", store, job_id, errors)
            await trio.lowlevel.cancel_shielded_checkpoint()
            await store.aclose()
        sqlite.close()
        assert len(errors) == 1
        assert type(errors[0]) is StoreError, repr(errors[0])


async def test_concurrent_jobs_store_every_outcome_in_order_while_their_calls_wait_for_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Group commits wait for room too: a leader that waits lets the next writers form a batch
    # of their own. Every outcome must still be stored once, in order, in its job.
    monkeypatch.setattr(_paths, "FAST_PASS_BUDGET", 0.0)
    store = Store.open(tmp_path / "jobs.db")

    async def fetch(target: Target) -> Result:
        return Result(target.url)

    statuses: list[JobState] = []
    async with open_runner(store, fetch, Config(jobs_per_caller=1)) as runner:

        async def run_job(caller: str) -> None:
            targets = [Target(f"https://example.test/{caller}/{i}") for i in range(20)]
            job_id, _ = await runner.submit(caller, "user", targets)
            job = await runner.wait(job_id)
            assert job is not None
            statuses.append(job.status)
            answer = await runner.status(job_id)
            assert answer is not None
            assert [t.result for t in answer[1]] == [Result(t.url) for t in targets]

        async with trio.open_nursery() as nursery:
            for c in range(6):
                nursery.start_soon(run_job, f"caller{c}")
    store.close()
    assert statuses == [JobState.DONE] * 6


async def test_calls_that_wait_for_room_leave_one_per_pass_in_the_order_they_came(
    never_room: tuple[SQLiteJobStore, str],
) -> None:
    # A thousand submitters refused together must not come back together: past their
    # deferrals, all of them would run in one pass, as long as all their calls together.
    store, job_id = never_room
    counter = PassCounter()
    trio.lowlevel.add_instrument(counter)
    came: list[int] = []
    left: list[tuple[int, int]] = []

    async def read(n: int) -> None:
        came.append(n)
        assert await store.get_job(job_id, now=NOW) is not None
        left.append((counter.passes, n))

    try:
        async with trio.open_nursery() as nursery:
            for n in range(CALLERS):
                nursery.start_soon(read, n)
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert [n for _, n in left] == came
    assert len({passes for passes, _ in left}) == CALLERS


async def test_calls_queued_for_room_when_the_store_closes_get_the_closed_store_error(
    never_room: tuple[SQLiteJobStore, str],
) -> None:
    # The queued calls sleep until the head hands on; the close must wake them all.
    store, job_id = never_room
    errors: list[Exception] = []
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(_make_the_call, "get_job", store, job_id, errors)
        for _ in range(2):  # the calls begin: one at the head, two queued
            await trio.lowlevel.cancel_shielded_checkpoint()
        await store.aclose()
    assert [type(e) for e in errors] == [StoreError] * 3
