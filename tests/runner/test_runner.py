"""The runner: serial drain, failure isolation, idempotency, caps, cancellation, leases."""

from __future__ import annotations

import json
import logging
import traceback
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

import trio_batch.runner._purge
import trio_batch.runner._waits
from trio_batch import (
    Busy,
    CallerBusy,
    ClassLimits,
    Config,
    InvalidRequest,
    InvalidTargets,
    Job,
    JobState,
    JobStore,
    Result,
    Runner,
    RunnerClosed,
    Store,
    Target,
    TargetState,
    TargetStatus,
    TooManyTargets,
    open_runner,
)
from trio_batch.runner._drains import Drains
from trio_batch.store import NewJob
from trio_batch.store.sqlite._job_store import SQLiteJobStore

from ..support.fakes import T0, FakeClock, ScriptedFetch, logged, urls

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=1, jobs_total=3)


async def run_job(runner: Runner, targets: list[Target], caller: str = "alice") -> str:
    job_id, reused = await runner.submit(caller, "user", targets)
    assert not reused
    job = await runner.wait(job_id)
    assert job is not None and job.is_terminal
    return job_id


async def test_targets_are_fetched_one_at_a_time_in_order(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls(*"abcdef")
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id = await run_job(runner, targets)
        status = await runner.status(job_id)
    assert fetch.calls == [t.url for t in targets]
    assert fetch.peak_in_flight == 1
    assert status is not None
    job, stored = status
    assert (job.status, job.targets_done, job.targets_failed) == (JobState.DONE, 6, 0)
    assert [t.status for t in stored] == [TargetState.DONE] * 6
    assert stored[2].result == Result(f"content of {targets[2].url}", {"url": targets[2].url})


async def test_jobs_drain_concurrently_but_each_serially(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        ids = [
            (await runner.submit(caller, "user", urls(*(f"{caller}{i}" for i in range(5)))))[0]
            for caller in ("a", "b", "c")
        ]
        for job_id in ids:
            job = await runner.wait(job_id)
            assert job is not None and job.status == JobState.DONE
    for caller in ("a", "b", "c"):
        mine = [u for u in fetch.calls if u.rsplit("/", 1)[1].startswith(caller)]
        assert mine == [f"https://example.test/{caller}{i}" for i in range(5)]


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["ok1", "ok2"], JobState.DONE),
        (["x/fail", "y/fail"], JobState.FAILED),
        (["ok1", "x/fail", "ok2"], JobState.PARTIAL),
    ],
)
async def test_a_failed_target_does_not_stop_the_job(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, names: list[str], expected: JobState
) -> None:
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id = await run_job(runner, urls(*names))
        status = await runner.status(job_id)
    assert status is not None
    job, targets = status
    assert job.status == expected
    assert job.targets_done == len(names)
    assert len(fetch.calls) == len(names)
    for target in targets:
        if target.url.endswith("fail"):
            assert target.status == TargetState.FAILED
            assert target.error == f"Boom: cannot fetch {target.url}"
            assert target.hint == "check the URL"
            assert target.result is None
        else:
            assert target.status == TargetState.DONE


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


@pytest.mark.parametrize(
    ("make", "error_part"),
    [
        (lambda: None, "returned NoneType, not a Result"),
        (lambda: {"content": "x"}, "returned dict, not a Result"),
        (lambda: Result("x", {"s": {1, 2}}), "cannot be stored as JSON"),
        (lambda: Result("x", {"n": float("nan")}), "cannot be stored as JSON"),
        (lambda: Result(b"bytes"), "content must be a str"),  # type: ignore[arg-type]
        (lambda: (_ for _ in ()).throw(KeyError("k")), "KeyError: 'k'"),
        (lambda: (_ for _ in ()).throw(Unprintable()), "Unprintable: <unprintable Unprintable>"),
        (lambda: (_ for _ in ()).throw(ValueError("\udc80 bad")), "ValueError: \\udc80 bad"),
        (
            lambda: (_ for _ in ()).throw(ExceptionGroup("many", [ValueError("a")])),
            "ExceptionGroup: many (1 sub-exception)",
        ),
    ],
)
async def test_garbage_from_the_fetch_fails_only_that_target(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, make: Any, error_part: str
) -> None:
    targets = urls("bad", "good")
    fetch.custom[targets[0].url] = make
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id = await run_job(runner, targets)
        status = await runner.status(job_id)
    assert status is not None
    job, stored = status
    assert job.status == JobState.PARTIAL
    assert stored[0].status == TargetState.FAILED
    assert stored[0].error is not None and error_part in stored[0].error
    assert stored[1].status == TargetState.DONE


async def test_resubmitting_the_same_targets_reuses_the_job(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = [Target.from_json({"url": "https://example.test/a", "options": {"grep": "x"}})]
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id = await run_job(runner, targets)
        before = await runner.status(job_id)
        clock.advance(10)
        # The same targets, spelled differently in JSON, are the same job.
        spelled = json.loads(
            '{"options": {"jq": "", "grep": "x"}, "url": "https://example.test/a"}'
        )
        again, reused = await runner.submit("alice", "user", [Target.from_json(spelled)])
        after = await runner.status(job_id)
        other, reused_by_bob = await runner.submit("bob", "user", targets)
        await runner.wait(other)
    assert (again, reused) == (job_id, True)
    assert not reused_by_bob and other != job_id
    assert fetch.calls == ["https://example.test/a"] * 2  # once for alice, once for bob
    assert before == after  # a reuse writes nothing, not even the lease


async def test_reuse_lasts_as_long_as_the_lease(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls("a", "b")
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id = await run_job(runner, targets)
        clock.advance(CONFIG.ttl - 1)
        assert await runner.submit("alice", "user", targets) == (job_id, True)
        clock.advance(1)
        fresh, reused = await runner.submit("alice", "user", targets)
        await runner.wait(fresh)
    assert not reused and fresh != job_id
    assert len(fetch.calls) == 4


async def test_a_drain_whose_job_lapsed_mid_target_says_why_it_stopped(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    targets = urls("a", "gate", "c")
    started, release = fetch.gate(targets[1].url)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        clock.advance(CONFIG.ttl + 1)  # the lease lapses while the target is fetched
        with caplog.at_level(logging.WARNING, logger="trio_batch"):
            release.set()
            assert await runner.wait(job_id) is None
    refused = [r for r in caplog.records if r.getMessage().startswith("outcome refused")]
    assert [(r.job_id, r.idx) for r in refused] == [(job_id, 1)]  # type: ignore[attr-defined]
    assert fetch.calls == [t.url for t in targets[:2]]  # nothing fetched after the refusal


async def test_every_target_write_bumps_the_lease(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls("a", "gate")
    started, release = fetch.gate(targets[1].url)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        status = await runner.status(job_id)
        assert status is not None and status[0].expires_at == T0 + CONFIG.ttl
        clock.advance(60)
        release.set()
        job = await runner.wait(job_id)
        assert job is not None and job.expires_at == T0 + 60 + CONFIG.ttl
        clock.advance(CONFIG.ttl - 0.5)
        assert await runner.status(job_id) is not None
        clock.advance(0.5)
        assert await runner.status(job_id) is None  # lapsed: gone, even before a purge
        assert await runner.wait(job_id) is None
        assert await runner.cancel(job_id) is False


async def test_under_the_default_config_a_lease_lasts_24_hours_after_the_last_write(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls("a", "gate")
    started, release = fetch.gate(targets[1].url)
    async with open_runner(job_store, fetch, now=clock) as runner:  # Config() as it ships
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        clock.advance(3600)
        release.set()  # the last write: the outcome of "gate", an hour after the submit
        await runner.wait(job_id)
        clock.advance(23 * 3600 + 59 * 60)
        status = await runner.status(job_id)
        assert status is not None and status[0].status == JobState.DONE
        assert await runner.submit("alice", "user", targets) == (job_id, True)
        clock.advance(60)
        assert await runner.status(job_id) is None
        fresh, reused = await runner.submit("alice", "user", targets)
        assert not reused and fresh != job_id
        await runner.wait(fresh)


async def test_caps_are_enforced(store: Store, fetch: ScriptedFetch, clock: FakeClock) -> None:
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        with pytest.raises(TooManyTargets):
            await runner.submit("alice", "user", urls(*"abcdefghi"))
        first, _ = await runner.submit("alice", "user", urls("x/hang"))
        # The job is already running when submit returns, so this is deterministic.
        with pytest.raises(CallerBusy):
            await runner.submit("alice", "user", urls("other"))
        await runner.submit("bob", "user", urls("y/hang"))
        await runner.submit("carol", "user", urls("z/hang"))
        with pytest.raises(Busy):
            await runner.submit("dave", "user", urls("w"))
        # Reuse bypasses every cap.
        assert await runner.submit("alice", "user", urls("x/hang")) == (first, True)
        status = await runner.status(first)
        assert status is not None and status[0].status == JobState.RUNNING
        assert status[1][0].status == TargetState.RUNNING


async def test_a_refusal_keeps_nothing_of_the_job_alive(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # A thousand callers backing off, each holding its refusal: each must hold next to nothing
    # (not the store's frames, not the drain and request built for a job never created).
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        await runner.submit("alice", "user", urls("x/hang"))
        await runner.submit("bob", "user", urls("y/hang"))
        await runner.submit("carol", "user", urls("z/hang"))
        for caller, refusal in (("alice", CallerBusy), ("dave", Busy)):
            with pytest.raises(refusal) as refused:
                await runner.submit(caller, "user", urls("w"))
            frames = [frame for frame, _ in traceback.walk_tb(refused.value.__traceback__)]
            ours = [f.f_code.co_qualname for f in frames if "trio_batch" in f.f_code.co_filename]
            assert ours == ["Runner.submit"]
            assert {"drain", "request"}.isdisjoint(frames[-1].f_locals)


async def test_a_refused_retry_keeps_nothing_of_the_job_alive(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # As a refused submit: a caller backing off on a refused retry holds no job, no targets.
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        failed, _ = await runner.submit("alice", "user", urls("fail"))
        await runner.wait(failed)
        await runner.submit("alice", "user", urls("x/hang"))
        with pytest.raises(CallerBusy) as refused:
            await runner.retry(failed)
        frames = [frame for frame, _ in traceback.walk_tb(refused.value.__traceback__)]
        ours = [f.f_code.co_qualname for f in frames if "trio_batch" in f.f_code.co_filename]
        assert ours == ["Runner.retry"]
        assert {"job", "targets"}.isdisjoint(frames[-1].f_locals)


@pytest.mark.parametrize(
    "bad",
    [[], [{"url": "https://x"}], "https://x", None, [Target("a"), Target("a")]],
)
async def test_invalid_targets_are_refused(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, bad: Any
) -> None:
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        with pytest.raises(InvalidTargets):
            await runner.submit("alice", "user", bad)
        with pytest.raises(InvalidRequest):
            await runner.submit("", "user", urls("a"))
        with pytest.raises(InvalidRequest):
            await runner.submit("alice", ["not", "a", "class"], urls("a"))  # type: ignore[arg-type]
    assert fetch.calls == []
    assert store.count_live_jobs() == 0


async def test_cancel_lets_the_in_flight_target_finish_and_stops(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls("a", "gate", "c", "d")
    started, release = fetch.gate(targets[1].url)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        running = await runner.status(job_id)
        assert running is not None
        assert [t.status for t in running[1]] == ["done", "running", "pending", "pending"]
        assert await runner.cancel(job_id) is True
        cancelled = await runner.status(job_id)
        assert cancelled is not None and cancelled[0].status == JobState.CANCELLED
        assert cancelled[1][1].status == TargetState.RUNNING  # still being fetched
        release.set()
        job = await runner.wait(job_id)
        assert job is not None and job.status == JobState.CANCELLED
        final = await runner.status(job_id)
        assert await runner.cancel(job_id) is False  # already terminal
    assert final is not None
    assert [t.status for t in final[1]] == ["done", "done", "pending", "pending"]
    assert final[0].targets_done == 2
    assert fetch.calls == [t.url for t in targets[:2]]
    # The cancelled job no longer counts against the caps; its completed work stays readable.
    assert final[1][1].result is not None


async def test_a_second_cancel_while_the_target_in_flight_still_runs_is_false(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # The job is terminal from the first cancel on, though its drain is still alive.
    targets = urls("gate", "b")
    started, release = fetch.gate(targets[0].url)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        assert await runner.cancel(job_id) is True
        assert await runner.cancel(job_id) is False
        assert fetch.in_flight == 1  # still running: the second answer came from the store
        release.set()
        job = await runner.wait(job_id)
    assert job is not None and (job.status, job.targets_done) == (JobState.CANCELLED, 1)
    assert fetch.calls == [targets[0].url]


async def test_cancel_while_the_last_target_is_in_flight_keeps_the_job_cancelled(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # The last outcome completes the job's count, but the cancel came first: it stays cancelled.
    targets = urls("a", "gate")
    started, release = fetch.gate(targets[1].url)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        assert await runner.cancel(job_id) is True
        release.set()
        job = await runner.wait(job_id)
        final = await runner.status(job_id)
    assert job is not None and final is not None
    assert (job.status, job.targets_done, job.targets_failed) == (JobState.CANCELLED, 2, 0)
    assert final[0] == job
    assert [t.status for t in final[1]] == [TargetState.DONE, TargetState.DONE]


async def test_cancel_between_targets_leaves_no_running_target(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls("a", "b", "c")
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        # Cancel right away, before the drain task has run at all.
        assert await runner.cancel(job_id)
        await runner.wait(job_id)
        status = await runner.status(job_id)
    assert status is not None
    assert status[0].status == JobState.CANCELLED
    assert [t.status for t in status[1]] == [TargetState.PENDING] * 3
    assert fetch.calls == []


@pytest.mark.parametrize(
    "bad_id", ["", "unknown", "'; DROP TABLE jobs; --", "x" * 100_000, None, 42]
)
async def test_bad_ids_give_none_or_false(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, bad_id: Any
) -> None:
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id = await run_job(runner, urls("a"))
        assert await runner.status(bad_id) is None
        assert await runner.wait(bad_id) is None
        assert await runner.cancel(bad_id) is False
        assert await runner.status(job_id) is not None


async def test_cancel_of_a_finished_job_is_false(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id = await run_job(runner, urls("a"))
        assert await runner.cancel(job_id) is False
        job = await runner.wait(job_id)
    assert job is not None and job.status == JobState.DONE


async def test_restart_marks_jobs_left_live_as_failed(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # A job left running by a process that died: created, one outcome stored, then nothing.
    job, _ = store.create_job(
        NewJob(
            "alice",
            "user",
            urls("a", "b", "c"),
            ttl=100,
            targets_per_job=8,
            jobs_per_caller=1,
            jobs_total=3,
            status=JobState.RUNNING,
        ),
        now=clock(),
    )
    store.record_outcome(job.id, 0, result=Result("kept"), ttl=100, now=T0)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        status = await runner.status(job.id)
        assert status is not None
        assert (status[0].status, status[0].error) == (JobState.FAILED, "restart")
        assert [t.status for t in status[1]] == ["done", "pending", "pending"]
        assert status[1][0].result == Result("kept")
        assert await runner.wait(job.id) == status[0]
        # The caller is free again: the reaped job no longer counts as live.
        other = await run_job(runner, urls("z"))
    assert fetch.calls == ["https://example.test/z"]
    assert other != job.id


async def test_shutdown_cancels_a_hung_fetch_and_marks_the_job(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls("a", "x/hang", "c")
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        hanging = fetch.watch(targets[1].url)
        job_id, _ = await runner.submit("alice", "user", targets)
        await hanging.wait()
    # Leaving the block did not wait for the hung fetch.
    status = store.get_status(job_id, now=clock())
    assert status is not None
    assert (status[0].status, status[0].error) == (JobState.FAILED, "shutdown")
    assert [t.status for t in status[1]] == ["done", "pending", "pending"]
    with pytest.raises(RunnerClosed):
        await runner.submit("bob", "user", urls("late"))


async def test_an_exception_in_the_body_comes_out_as_itself(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    with pytest.raises(ZeroDivisionError):
        async with open_runner(store, fetch, CONFIG, now=clock) as runner:
            hang = urls("x/hang")
            hanging = fetch.watch(hang[0].url)
            await runner.submit("alice", "user", hang)
            await hanging.wait()
            1 / 0  # noqa: B018
    assert store.count_live_jobs() == 0


async def test_cancelling_the_host_scope_is_not_swallowed(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    with trio.CancelScope() as scope:
        async with open_runner(store, fetch, CONFIG, now=clock) as runner:
            await runner.submit("alice", "user", urls("x/hang"))
            scope.cancel()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert store.count_live_jobs() == 0


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
async def test_keyboard_interrupt_and_system_exit_from_a_fetch_propagate(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, exc_type: type[BaseException]
) -> None:
    targets = urls("boom")

    def explode() -> object:
        raise exc_type()

    fetch.custom[targets[0].url] = explode
    with pytest.raises(BaseExceptionGroup) as info:
        async with open_runner(store, fetch, CONFIG, now=clock) as runner:
            await runner.submit("alice", "user", targets)
            await trio.sleep_forever()
    assert info.group_contains(exc_type)
    assert store.count_live_jobs() == 0


async def test_logs_are_structured_and_never_contain_results(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_batch")
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id = await run_job(runner, urls("secret", "x/fail"))
    records = [r for r in caplog.records if r.name == "trio_batch"]
    messages = [r.getMessage() for r in records]
    assert "job submitted" in messages and "job finished" in messages
    submitted = next(r for r in records if r.getMessage() == "job submitted")
    assert (submitted.job_id, submitted.caller) == (job_id, "alice")  # type: ignore[attr-defined]
    stored = [r for r in records if r.getMessage() == "target stored"]
    assert [(r.idx, r.status) for r in stored] == [(0, "done"), (1, "failed")]  # type: ignore[attr-defined]
    assert "content of" not in caplog.text


async def test_watch_yields_each_outcome_as_stored_then_the_job(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls("a", "gate", "x/fail")
    started, release = fetch.gate(targets[1].url)
    seen: list[object] = []
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        stream = runner.watch(job_id)
        first = await anext(stream)  # already stored before the watch began
        assert first.url == targets[0].url  # type: ignore[union-attr]
        release.set()
        seen = [item async for item in stream]
        assert [item async for item in runner.watch(job_id)][-1] == seen[-1]  # replay works
        assert [item async for item in runner.watch("unknown")] == []
    assert [(t.idx, t.status) for t in seen[:-1]] == [(1, "done"), (2, "failed")]  # type: ignore[union-attr]
    job = seen[-1]
    assert job == store.get_job(job_id, now=clock()) and job.status == JobState.PARTIAL  # type: ignore[union-attr]


async def test_watch_of_a_cancelled_job_ends_once_the_drain_stops(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls("gate", "b")
    started, release = fetch.gate(targets[0].url)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        await runner.cancel(job_id)
        items: list[object] = []

        async def collect() -> None:
            items.extend([item async for item in runner.watch(job_id)])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect)
            await trio.testing.wait_all_tasks_blocked()
            assert items == []  # the in-flight target is not stored yet
            release.set()
    assert [getattr(i, "idx", None) for i in items] == [0, None]
    assert items[-1].status == JobState.CANCELLED  # type: ignore[union-attr]


async def test_watching_a_job_reads_each_outcome_once(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A watcher re-read every target of the job at each outcome: n^2 rows for n targets (a
    # 4,000-target job took 12 s to follow instead of 0.4 s).
    rows_read: list[int] = []
    real_read = SQLiteJobStore.get_outcomes

    async def counted(self: SQLiteJobStore, *args: Any, **kwargs: Any) -> Any:
        found = await real_read(self, *args, **kwargs)
        rows_read.append(0 if found is None else len(found[1]))
        return found

    monkeypatch.setattr(SQLiteJobStore, "get_outcomes", counted)
    # So that it reads on, page by page.
    monkeypatch.setattr(trio_batch.runner._waits, "WATCH_PAGE", 4)
    targets = [Target(f"https://example.test/{i}") for i in range(40)]
    config = Config(ttl=CONFIG.ttl, targets_per_job=40)
    async with open_runner(store, fetch, config, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        live = [item async for item in runner.watch(job_id)]  # wakes at each outcome
        assert sum(rows_read) == 40
        finished = [item async for item in runner.watch(job_id)]  # all stored: 10 full pages
        assert sum(rows_read) == 80
    for items in (live, finished):
        assert [getattr(item, "idx", None) for item in items] == [*range(40), None]
        assert items[-1].status == JobState.DONE  # type: ignore[union-attr]
    assert len(fetch.calls) == 40


async def test_class_limits_override_the_caps_for_a_caller_class(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    config = Config(
        targets_per_job=8,
        jobs_per_caller=2,
        class_limits={"anonymous": ClassLimits(targets_per_job=2, jobs_per_caller=1)},
    )
    async with open_runner(store, fetch, config, now=clock) as runner:
        with pytest.raises(TooManyTargets, match="limit is 2"):
            await runner.submit("anon", "anonymous", urls("a", "b", "c"))
        await runner.submit("anon", "anonymous", urls("x/hang"))
        with pytest.raises(CallerBusy):
            await runner.submit("anon", "anonymous", urls("y/hang"))
        # Other classes keep the Config's caps.
        await runner.submit("member", "user", urls(*"abcdefgh"[:7], "z/hang"))
        await runner.submit("member", "user", urls("w/hang"))


@pytest.mark.parametrize("call", ["submit", "cancel", "forget", "status", "overview", "target"])
async def test_each_call_is_a_cancel_point_before_it_does_anything(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, call: str
) -> None:
    # Store calls run to completion once started, so a loop of them could never be cancelled
    # if the call did not check for a cancel first.
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        done = await run_job(runner, urls("done"), caller="bob")
        live, _ = await runner.submit("alice", "user", urls("x/hang"))
        calls = {
            "submit": lambda: runner.submit("carol", "user", urls("new")),
            "cancel": lambda: runner.cancel(live),
            "forget": lambda: runner.forget(done),
            "status": lambda: runner.status(done),
            "overview": lambda: runner.overview(done),
            "target": lambda: runner.target(done, 0),
        }
        with trio.CancelScope() as scope:
            scope.cancel()
            await calls[call]()
        assert scope.cancelled_caught
        # Nothing was done: no job created, none cancelled, none forgotten.
        jobs = {row[0]: row[1] for row in store.db.execute("SELECT caller, status FROM jobs")}
        assert jobs == {"bob": "done", "alice": "running"}
        await runner.cancel(live)


class _TimedPurges(SQLiteJobStore):
    """Purge batches of growing length (10 ms, 20 ms, ...) on trio's clock and on the one the
    runner reads as real time; once armed, records when each began and ended, and how long it
    took. ``leap``: trio's clock also leaps that far during each batch, as an autojump clock
    does to the next timer while a batch is on the store thread.

    A batch runs on the loop thread: a call to the store thread would leave every task blocked,
    and the autojump clock would leap to the runner's next periodic purge meanwhile.
    """

    def __init__(self, store: Store, clock: trio.testing.MockClock, leap: float) -> None:
        super().__init__(store)
        self.clock = clock
        self.leap = leap
        self.real = 0.0  # what the runner reads as time.perf_counter()
        self.first_round_over = trio.Event()  # the runner's own purge, at open, found nothing
        self.armed = False
        self.batches: list[tuple[float, float, float]] = []

    async def purge_expired(self, *, now: float, batch_size: int) -> int:
        start = trio.current_time()
        purged = self.store.purge_expired(now, batch_size=batch_size, max_batches=1)
        took = 0.010 * (len(self.batches) + 1)
        self.real += took
        self.clock.jump(took + self.leap)
        if self.armed:
            self.batches.append((start, trio.current_time(), took))
        self.first_round_over.set()
        return purged


@pytest.mark.parametrize(
    ("draining", "leap", "pause"), [(False, 0.0, 1.0), (True, 0.0, 3.0), (True, 300.0, 3.0)]
)
async def test_the_purge_pauses_longer_between_batches_while_jobs_drain(
    store: Store,
    fetch: ScriptedFetch,
    clock: FakeClock,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    draining: bool,
    leap: float,
    pause: float,
) -> None:
    timed = _TimedPurges(store, autojump_clock, leap)
    monkeypatch.setattr(
        trio_batch.runner._purge, "time", SimpleNamespace(perf_counter=lambda: timed.real)
    )
    # The periodic purge stays asleep through the leaps.
    config = Config(ttl=100, jobs_per_caller=100, jobs_total=100, purge_interval=86400)
    async with open_runner(timed, fetch, config, now=clock) as runner:
        await timed.first_round_over.wait()
        if draining:
            await runner.submit("alice", "user", urls("x/hang"))
        batch = trio_batch.runner._purge.PURGE_BATCH
        for i in range(2 * batch + 1):  # three batches: two full ones, then the last job
            store.create_job(
                NewJob(
                    f"old{i}",
                    "user",
                    urls("a"),
                    ttl=100,
                    targets_per_job=8,
                    jobs_per_caller=1,
                    jobs_total=1000,
                ),
                now=clock.now - 1000,
            )
        timed.armed = True
        assert await runner.purge_expired() == 2 * batch + 1
    # After each full batch, a pause of the batch's own time (not the leap) times the case's.
    (_, end0, took0), (start1, end1, took1), (start2, _, _) = timed.batches
    assert start1 - end0 == pytest.approx(pause * took0)
    assert start2 - end1 == pytest.approx(pause * took1)


async def test_lapsed_jobs_are_purged_now_and_periodically(
    store: Store,
    fetch: ScriptedFetch,
    clock: FakeClock,
    mock_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = Config(ttl=100, purge_interval=60, jobs_per_caller=5, jobs_total=50)
    caplog.set_level(logging.INFO, logger="trio_batch")
    with logged("lapsed jobs purged") as purged:
        async with open_runner(store, fetch, config, now=clock) as runner:
            ids = [await run_job(runner, urls(f"job{i}")) for i in range(3)]
            assert await runner.purge_expired() == 0
            clock.advance(100)
            assert await runner.purge_expired() == 3
            kept = await run_job(runner, urls("kept"))
            clock.advance(50)
            fresh, _ = await runner.submit("alice", "user", urls("fresh"))
            await runner.wait(fresh)
            clock.advance(60)  # "kept" has lapsed, "fresh" has not
            # Move trio time until the background purge has run (its previous round may still
            # be on the store thread, so one jump might land before its next sleep starts).
            while not purged.is_set():
                mock_clock.jump(config.purge_interval)
                await trio.testing.wait_all_tasks_blocked()
            remaining = {row[0] for row in store.db.execute("SELECT id FROM jobs")}
    assert remaining == {fresh}
    assert not set(ids) & remaining and kept not in remaining
    assert store.db.execute("SELECT count(*) FROM targets").fetchone()[0] == 1


# ---------------------------------------------------------------------------------------------
# Found in review: a job was visible (and reusable) before its drain was registered; a cancel
# through the reused id did not reach the drain, which then fetched a target after cancel().


async def test_cancel_through_a_reused_id_before_the_drain_starts(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first submit's job is committed and visible, its drain task not started yet: held
    # here (Drains.start deferred) while the same caller submits again and cancels.
    targets = urls("t0", "t1")
    held: list[tuple[Drains, Any, Job]] = []
    real_start = Drains.start

    def start(self: Drains, drain: Any, job: Job) -> None:
        if not held:
            held.append((self, drain, job))
        else:
            real_start(self, drain, job)

    monkeypatch.setattr(Drains, "start", start)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        first = await runner.submit("alice", "user", targets)
        assert held and first == (held[0][2].id, False)
        # The same caller submits again (a retried request): the job is reused...
        job_id, reused = await runner.submit("alice", "user", targets)
        assert reused and job_id == first[0]
        # ...and cancelled; cancel() says it worked, wait() says the drain stopped.
        assert await runner.cancel(job_id)
        real_start(*held[0])  # the first submit's drain starts only now
        waited = await runner.wait(job_id)
        assert waited is not None and waited.status == JobState.CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        # Nothing may be fetched after cancel() returned True (and wait() returned).
        assert fetch.calls == []


# ---------------------------------------------------------------------------------------------
# Found in review: status() could report two targets as running (a snapshot older than
# drain.in_flight).


async def test_status_never_reports_two_running_targets(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot_taken, release = trio.Event(), trio.Event()
    real_get_status = SQLiteJobStore.get_status

    async def get_status(self: SQLiteJobStore, *args: Any, **kwargs: Any) -> Any:
        answer = await real_get_status(self, *args, **kwargs)
        snapshot_taken.set()
        await release.wait()  # the snapshot grows old while the drain goes on
        return answer

    monkeypatch.setattr(SQLiteJobStore, "get_status", get_status)
    started_b, go_b = fetch.gate("https://example.test/b")
    started_c, go_c = fetch.gate("https://example.test/c")
    statuses: list[tuple[Job, list[TargetStatus]] | None] = []
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a", "b", "c"))
        await started_b.wait()
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                statuses.append(await runner.status(job_id))

            nursery.start_soon(read)
            await snapshot_taken.wait()  # the snapshot: a done, b running, c pending
            go_b.set()
            await started_c.wait()  # b stored, c in flight
            release.set()
        await runner.cancel(job_id)
        go_c.set()
    [status] = statuses
    assert status is not None
    running = [t.idx for t in status[1] if t.status == TargetState.RUNNING]
    assert len(running) <= 1, f"targets {running} all read as running"
