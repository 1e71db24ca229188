"""Retrying a job's failed or unfinished targets, exporting it merged with its retries, and
cancelling a caller's jobs by filter: on every backend, through the runner."""

from __future__ import annotations

import pytest
import trio

from trio_batch import (
    Config,
    InvalidRequest,
    InvalidTargets,
    Job,
    JobFilter,
    JobLive,
    JobState,
    JobStore,
    NewJob,
    Options,
    OutcomeWrite,
    Result,
    Runner,
    Target,
    open_runner,
)
from trio_batch.runner._batch_ops import (
    EXPORT_PAGE,
    export_targets,
    matching_live_jobs,
    retry_targets,
)

from ..support.fakes import T0, FakeClock, ScriptedFetch

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=4, jobs_total=8)


def _targets() -> list[Target]:
    return [
        Target("https://example.test/a", custom_id="row-a"),
        Target("https://example.test/fail", Options(grep="x"), custom_id="row-f"),
        Target("https://example.test/c", custom_id="row-c"),
        Target("https://example.test/d"),
    ]


async def _killed_job(store: JobStore, clock: FakeClock) -> str:
    """A job a dead runner left running: a success, a failure, two targets never fetched."""
    new = NewJob(
        "alice",
        "user",
        _targets(),
        ttl=100,
        targets_per_job=8,
        jobs_per_caller=4,
        jobs_total=8,
        status=JobState.RUNNING,
        metadata={"team": "search"},
    )
    job, _ = await store.create_job(new, now=clock())
    await store.record_outcome(OutcomeWrite(job.id, 0, result=Result("a")), ttl=100, now=T0)
    await store.record_outcome(OutcomeWrite(job.id, 1, error="Boom: no"), ttl=100, now=T0)
    return job.id


async def _export(runner: Runner, job_id: str, **kwargs: object) -> list[tuple[str, int, str]]:
    status = await runner.status(job_id)
    assert status is not None
    return [
        (jid, t.idx, str(t.status))
        async for jid, t in runner.export(status[0], **kwargs)  # type: ignore[arg-type]
    ]


async def test_a_restart_killed_job_is_retried_and_its_merged_export_is_complete(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    parent = await _killed_job(job_store, clock)
    # The failing URL succeeds this time.
    fetch.custom["https://example.test/fail"] = lambda: Result("fine now")
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        job = await runner.store.get_job(parent, now=clock())
        assert job is not None and (job.status, job.error) == (JobState.FAILED, "restart")
        with pytest.raises(InvalidRequest, match="only"):
            await runner.retry(parent, only=["done"])
        assert await runner.retry(parent, only=["failed"], caller="mallory") is None
        retried = await runner.retry(parent, only=["failed", "pending"])
        assert retried is not None and not retried[1]
        child_id = retried[0]
        child = await runner.wait(child_id)
        assert child is not None and child.status is JobState.DONE
        assert (child.parent_id, child.metadata, child.caller_class) == (
            parent,
            {"team": "search"},
            "user",
        )
        status = await runner.status(child_id)
        assert status is not None
        assert [(t.url, t.options, t.custom_id) for t in status[1]] == [
            (t.url, t.options, t.custom_id) for t in _targets()[1:]
        ]
        # Retrying the same job the same way again is the same retry (idempotency).
        assert await runner.retry(parent, only=["pending", "failed"]) == (child_id, True)
        assert await _export(runner, parent) == [
            (parent, 0, "done"),
            (parent, 1, "failed"),
            (parent, 2, "pending"),
            (parent, 3, "pending"),
        ]
        merged = [(child_id, i, "done") for i in (1, 2, 3)]
        assert await _export(runner, parent, merged=True) == [(parent, 0, "done"), *merged]
        assert await _export(runner, parent, merged=True, after=1) == merged[1:]


async def test_a_retry_of_a_retry_is_merged_all_the_way_down(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        first, _ = await runner.submit("alice", "user", _targets())
        assert (await runner.wait(first)) is not None
        with pytest.raises(InvalidTargets, match="no pending target"):
            await runner.retry(first, only=["pending"])
        second = await runner.retry(first)  # the failure, failing again
        assert second is not None
        assert (await runner.wait(second[0])) is not None
        fetch.custom["https://example.test/fail"] = lambda: Result("at last")
        third = await runner.retry(second[0])
        assert third is not None
        assert (await runner.wait(third[0])) is not None
        lines = await _export(runner, first, merged=True)
    assert lines == [
        (first, 0, "done"),
        (third[0], 1, "done"),
        (first, 2, "done"),
        (first, 3, "done"),
    ]


async def test_a_live_job_is_not_retried(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    started, release = fetch.gate("https://example.test/a")
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", _targets())
        await started.wait()
        with pytest.raises(JobLive):
            await runner.retry(job_id, only=["pending"])
        release.set()
        await runner.wait(job_id)


async def test_bulk_cancel_touches_only_the_callers_matching_live_jobs(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    hang = [Target(f"https://example.test/{i}/hang") for i in range(3)]
    # A cancelled job's hanging fetch is cut short at once, so its drain ends.
    config = Config(ttl=100, targets_per_job=8, jobs_per_caller=4, jobs_total=8, cancel_grace=0.01)
    started = fetch.watch(hang[0].url)
    async with open_runner(job_store, fetch, config, now=clock) as runner:
        a1, _ = await runner.submit("alice", "user", hang[:1], metadata={"run": "1"})
        await started.wait()
        a2, _ = await runner.submit("alice", "user", hang[1:2], metadata={"run": "2"})
        b1, _ = await runner.submit("bob", "user", hang[:1], metadata={"run": "1"})
        done, _ = await runner.submit("alice", "user", [Target("https://example.test/ok")])
        await runner.wait(done)
        where = JobFilter(labels=(("run", "1"),))
        assert await runner.cancel_matching("alice", where, dry_run=True) == [a1]
        assert await runner.cancel_matching("alice", where) == [a1]
        assert await runner.cancel_matching("alice", where) == []
        # Not live: the done job is never cancelled, whatever the filter asks for.
        ended = JobFilter(statuses=frozenset({JobState.DONE}))
        assert await runner.cancel_matching("alice", ended) == []
        with trio.fail_after(30):
            assert (await runner.wait(a1)) is not None
        statuses = {}
        for job_id in (a1, a2, b1, done):
            job = await runner.store.get_job(job_id, now=clock())
            assert job is not None
            statuses[job_id] = job.status
        assert statuses == {
            a1: JobState.CANCELLED,
            a2: JobState.RUNNING,
            b1: JobState.RUNNING,
            done: JobState.DONE,
        }
        assert await runner.cancel_matching("alice", JobFilter()) == [a2]
        assert (await runner.store.get_job(b1, now=clock())).status is JobState.RUNNING  # type: ignore[union-attr]
        await runner.cancel(b1)


async def test_a_merged_export_shows_every_retrys_outcomes_not_only_the_newest(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    parent = await _killed_job(job_store, clock)
    fetch.custom["https://example.test/fail"] = lambda: Result("fine now")
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        older = await runner.retry(parent, only=["failed"])
        assert older is not None and (await runner.wait(older[0])) is not None
        clock.advance(1)  # the next retry is the newer one
        newer = await runner.retry(parent, only=["pending"])
        assert newer is not None and (await runner.wait(newer[0])) is not None
        lines = await _export(runner, parent, merged=True)
    assert lines == [
        (parent, 0, "done"),
        (older[0], 1, "done"),  # the older retry's outcome, which the newer one has not
        (newer[0], 2, "done"),
        (newer[0], 3, "done"),
    ]


async def test_a_merged_export_follows_retries_past_eight_deep(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(job_store, fetch, CONFIG, now=clock) as runner:
        first, _ = await runner.submit("alice", "user", _targets())
        assert (await runner.wait(first)) is not None
        job_id = first
        for depth in range(1, 11):  # ten retries deep, each of the last one's failure
            if depth == 10:
                fetch.custom["https://example.test/fail"] = lambda: Result("at last")
            retried = await runner.retry(job_id)
            assert retried is not None and (await runner.wait(retried[0])) is not None
            job_id = retried[0]
        lines = await _export(runner, first, merged=True)
    assert lines[1] == (job_id, 1, "done")


async def _three_pages_running(job_store: JobStore, clock: FakeClock) -> Job:
    """A running job of three export pages of targets."""
    many = 3 * EXPORT_PAGE
    targets = [Target(f"https://example.test/{i}") for i in range(many)]
    new = NewJob(
        "alice",
        "user",
        targets,
        ttl=100,
        targets_per_job=many,
        jobs_per_caller=4,
        jobs_total=8,
        status=JobState.RUNNING,
    )
    job, _ = await job_store.create_job(new, now=clock())
    return job


async def test_a_cancelled_export_stops_at_once_however_little_its_reader_awaits(
    job_store: JobStore, clock: FakeClock
) -> None:
    # Its pages are store reads, which run to completion and never raise Cancelled: a reader
    # that awaits nothing else (a list built from it, `trio-batch results` printing) read the
    # whole job, a cancel or a Ctrl-C notwithstanding.
    job = await _three_pages_running(job_store, clock)
    read: list[int] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        async for _, target in export_targets(job_store, job, now=clock()):
            read.append(target.idx)  # no checkpoint of its own
    assert scope.cancelled_caught
    assert read == []


async def test_a_cancelled_retry_reads_no_further_page(
    job_store: JobStore, clock: FakeClock
) -> None:
    job = await _three_pages_running(job_store, clock)
    ended = await job_store.finish_job(job.id, JobState.CANCELLED, now=clock())
    assert ended is not None
    picked: list[Target] | None = None
    with trio.CancelScope() as scope:
        scope.cancel()
        picked = await retry_targets(
            job_store, ended, frozenset({"pending"}), now=clock(), limit=3 * EXPORT_PAGE
        )
    assert scope.cancelled_caught
    assert picked is None


async def test_a_cancelled_bulk_cancel_reads_no_page(job_store: JobStore, clock: FakeClock) -> None:
    found: list[Job] | None = None
    with trio.CancelScope() as scope:
        scope.cancel()
        found = await matching_live_jobs(job_store, "alice", JobFilter(), now=clock())
    assert scope.cancelled_caught
    assert found is None
