"""A drain stores an outcome on the spot (``JobStore.record_outcome_now``) when the store can,
and through the async call when it declines: whichever path a write takes, each outcome is
stored once, in order, and a cancel stops the drain before its next target.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from trio_batch import (
    Config,
    Job,
    JobState,
    OutcomeWrite,
    Result,
    Store,
    Target,
    Tracing,
    open_runner,
)
from trio_batch.store import Declined
from trio_batch.store.sqlite import _fast_path, _paths
from trio_batch.store.sqlite._job_store import SQLiteJobStore

from ..support.fakes import FakeClock, ScriptedFetch, urls

CONFIG = Config(ttl=100, targets_per_job=64, jobs_per_caller=1, jobs_total=3)


def record_paths(store: SQLiteJobStore, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """``(idx, on_the_spot)`` for each outcome write the drain offers the store on the spot (not
    counting the async call's own offer, once the drain has fallen back to it)."""
    offered: list[tuple[int, bool]] = []
    real_now, real_async = store.record_outcome_now, store.record_outcome
    in_async_call = False

    def spy(write: OutcomeWrite, *, ttl: float, now: float) -> Job | Declined | None:
        answer = real_now(write, ttl=ttl, now=now)
        if not in_async_call:
            offered.append((write.idx, not isinstance(answer, Declined)))
        return answer

    async def async_call(write: OutcomeWrite, *, ttl: float, now: float) -> Job | None:
        nonlocal in_async_call
        in_async_call = True
        try:
            return await real_async(write, ttl=ttl, now=now)
        finally:
            in_async_call = False

    async def no_purge(*, now: float, batch_size: int) -> int:
        return 0  # the runner's first purge, on the store thread, would race the drain's writes

    monkeypatch.setattr(store, "record_outcome_now", spy)
    monkeypatch.setattr(store, "record_outcome", async_call)
    monkeypatch.setattr(store, "purge_expired", no_purge)
    store._budget.seconds = 1.0  # no pass runs out of budget, however slow the machine
    return offered


async def stored_once_in_order(store: SQLiteJobStore, job_id: str, n: int, now: float) -> None:
    """Every target of the job has its own outcome, each written by one attempt."""
    found = await store.get_status(job_id, now=now)
    assert found is not None
    job, targets = found
    assert (job.status, job.targets_done, job.targets_failed) == (JobState.DONE, n, 0)
    assert [(t.idx, t.status, t.attempts) for t in targets] == [(i, "done", 1) for i in range(n)]
    assert [t.result for t in targets] == [
        Result(f"content of https://example.test/t{i}", {"url": f"https://example.test/t{i}"})
        for i in range(n)
    ]


async def test_a_lone_drain_stores_every_outcome_but_its_first_on_the_spot(
    fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteJobStore(Store.open(), owns_store=True)
    offered = record_paths(store, monkeypatch)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls(*(f"t{i}" for i in range(8))))
        assert await runner.wait(job_id) is not None
        await stored_once_in_order(store, job_id, 8, clock())
    # The first write gathers with whoever else is writing; alone since, the drain writes at once.
    assert offered == [(0, False)] + [(i, True) for i in range(1, 8)]


async def test_a_declined_write_mid_job_goes_the_async_way_nothing_lost_or_doubled(
    fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteJobStore(Store.open(), owns_store=True)
    offered = record_paths(store, monkeypatch)
    for i in (3, 4):  # these fetches use up the loop's budget: their writes must wait a pass
        url = f"https://example.test/t{i}"

        def spend(url: str = url) -> Result:
            store._budget.used = store._budget.seconds * 2
            return Result(f"content of {url}", {"url": url})

        fetch.custom[url] = spend
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls(*(f"t{i}" for i in range(8))))
        assert await runner.wait(job_id) is not None
        await stored_once_in_order(store, job_id, 8, clock())
    assert offered == [(0, False), (1, True), (2, True), (3, False), (4, False)] + [
        (i, True) for i in range(5, 8)
    ]


async def test_a_write_declined_beside_other_drains_is_offered_on_the_spot_once(
    fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Declined (its writer not alone), a write goes the async way, which does not ask the
    store to take it on the spot a second time: nothing ran between, the answer is the same."""
    store = SQLiteJobStore(Store.open(), owns_store=True)
    asked: list[tuple[str, int]] = []
    real_now = store.record_outcome_now

    def spy(write: OutcomeWrite, *, ttl: float, now: float) -> Job | Declined | None:
        asked.append((write.job_id, write.idx))
        return real_now(write, ttl=ttl, now=now)

    monkeypatch.setattr(store, "record_outcome_now", spy)
    store._budget.seconds = 1.0  # no pass runs out of budget, however slow the machine
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        a, _ = await runner.submit("alice", "user", urls(*(f"t{i}" for i in range(4))))
        b, _ = await runner.submit("bob", "user", urls(*(f"t{i}" for i in range(4))))
        assert await runner.wait(a) is not None and await runner.wait(b) is not None
        await stored_once_in_order(store, a, 4, clock())
        await stored_once_in_order(store, b, 4, clock())
    assert sorted(asked) == sorted((job_id, i) for job_id in (a, b) for i in range(4))


async def test_outcomes_written_beside_a_checkpoint_are_each_stored_once(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_paths, "CHECKPOINT_EVERY", 4)  # several checkpoints within the job
    checkpoints: list[str] = []
    copy_may_end = threading.Event()
    real_checkpoint = Store.checkpoint

    def held(self: Store, mode: str = "PASSIVE") -> Any:
        checkpoints.append(mode)
        if mode == "PASSIVE":  # the first copy lasts until two writes were made beside it
            copy_may_end.wait(timeout=30)
        return real_checkpoint(self, mode)

    beside: list[int] = []  # the writes made beside the copy so far, at each fetch

    monkeypatch.setattr(Store, "checkpoint", held)
    store = SQLiteJobStore(Store.open(tmp_path / "jobs.db"), owns_store=True)
    offered = record_paths(store, monkeypatch)
    n = 24

    def fetched(url: str) -> Result:
        if store._checkpoint_copying:
            beside.append(store._writes_beside_checkpoint)
        if beside and beside[-1] >= 2:
            copy_may_end.set()
        return Result(f"content of {url}", {"url": url})

    for i in range(n):
        url = f"https://example.test/t{i}"
        fetch.custom[url] = functools.partial(fetched, url)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls(*(f"t{i}" for i in range(n))))
        assert await runner.wait(job_id) is not None
        await stored_once_in_order(store, job_id, n, clock())
    assert copy_may_end.is_set() and checkpoints.count("RESTART") >= 2
    # Beside the copy the store took writes on the spot, up to its cap; past it, and while the
    # WAL restarted, it declined, and the async path (the store thread) took those writes.
    assert max(beside) >= 2
    assert [idx for idx, _ in offered] == list(range(n))
    declined = [idx for idx, on_the_spot in offered if not on_the_spot]
    assert declined[0] == 0 and len(declined) >= 2
    assert any(on_the_spot for _, on_the_spot in offered)


async def test_a_cancel_during_a_fetch_stores_it_on_the_spot_and_starts_no_next_target(
    fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteJobStore(Store.open(), owns_store=True)
    offered = record_paths(store, monkeypatch)
    targets: list[Target] = urls("t0", "t1", "t2", "t3")
    started, release = fetch.gate("https://example.test/t1")
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        assert await runner.cancel(job_id)
        release.set()
        job = await runner.wait(job_id)
        found = await store.get_status(job_id, now=clock())
    assert job is not None and job.status == JobState.CANCELLED
    assert found is not None
    assert [t.status for t in found[1]] == ["done", "done", "pending", "pending"]
    assert fetch.calls == [t.url for t in targets[:2]]  # nothing fetched after the cancel
    assert offered == [(0, False), (1, True)]  # the in-flight outcome, stored on the spot


async def test_a_traced_store_is_never_bypassed(
    fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Enabled(Tracing):
        enabled = True

    store = SQLiteJobStore(Store.open(), owns_store=True)
    offered = record_paths(store, monkeypatch)
    async with open_runner(store, fetch, CONFIG, now=clock, tracing=Enabled()) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("t0", "t1", "t2"))
        assert await runner.wait(job_id) is not None
        await stored_once_in_order(store, job_id, 3, clock())
    assert offered == []


async def test_an_on_the_spot_write_the_database_refuses_is_retried_the_async_way(
    fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteJobStore(Store.open(), owns_store=True)
    real = _fast_path.write_alone  # the on-the-spot write
    refusals = iter([True])

    def refuse_once(fast: Store, w: OutcomeWrite, ttl: float, now: float) -> object:
        if w.idx == 2 and next(refusals, False):
            raise sqlite3.OperationalError("disk I/O error")
        return real(fast, w, ttl, now)

    monkeypatch.setattr(_fast_path, "write_alone", refuse_once)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls(*(f"t{i}" for i in range(5))))
        assert await runner.wait(job_id) is not None
        await stored_once_in_order(store, job_id, 5, clock())
    assert next(refusals, "used") == "used"
