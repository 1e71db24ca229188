"""A drain counts its job's outcomes itself: the store answers ``STORED`` for each write that
leaves the job live as the drain sees it, and a ``Job`` is built only where one is needed (the
job's end, which ``Runner.wait`` returns; a stale view; a drain stopped before the end)."""

from __future__ import annotations

from typing import Any

import pytest

from trio_batch import Config, Job, JobState, OutcomeWrite, Store, open_runner, otel_tracing
from trio_batch.store import Declined
from trio_batch.store.sqlite._job_store import SQLiteJobStore

from ..support.fakes import FakeClock, ScriptedFetch, urls
from ..support.tracing import memory_provider, spans_named

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=1, jobs_total=3)


def record_answers(store: SQLiteJobStore, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every answer the store gives a drain's outcome write (declines left out)."""
    answers: list[Any] = []
    real_now, real_async = store.record_outcome_now, store.record_outcome

    def spy_now(write: OutcomeWrite, *, ttl: float, now: float) -> Any:
        answer = real_now(write, ttl=ttl, now=now)
        if not isinstance(answer, Declined):
            answers.append(answer)
        return answer

    async def spy_async(write: OutcomeWrite, *, ttl: float, now: float) -> Any:
        answers.append(await real_async(write, ttl=ttl, now=now))
        return answers[-1]

    monkeypatch.setattr(store, "record_outcome_now", spy_now)
    monkeypatch.setattr(store, "record_outcome", spy_async)
    return answers


async def test_a_drain_is_answered_a_job_only_at_its_jobs_end(
    fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteJobStore(Store.open(), owns_store=True)
    answers = record_answers(store, monkeypatch)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a", "1/fail", "c", "d", "4/fail"))
        job = await runner.wait(job_id)
        stored = await store.get_job(job_id, now=clock())
    assert len(answers) == 5
    assert [type(a).__name__ for a in answers[:4]] == ["Stored"] * 4  # no job built for those
    assert isinstance(answers[4], Job) and answers[4] == stored == job
    assert job is not None and (job.status, job.targets_done, job.targets_failed) == (
        JobState.PARTIAL,
        5,
        2,
    )


async def test_a_drain_stopped_mid_job_ends_with_the_outcomes_it_counted(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # The store answered STORED for the first two: the job the drain ends with (its span's
    # counts here) is built from its own count, not the job as it was created.
    provider, exporter = memory_provider()
    targets = urls("a", "fail", "hang")
    started = fetch.watch(targets[2].url)
    async with open_runner(store, fetch, now=clock, tracing=otel_tracing(provider)) as runner:
        await runner.submit("alice", "default", targets)
        await started.wait()
    [span] = spans_named(exporter, "trio_batch.job")
    attributes = span.attributes or {}
    assert (
        attributes["trio_batch.job.targets_done"],
        attributes["trio_batch.job.targets_failed"],
    ) == (
        2,
        1,
    )
    assert attributes["trio_batch.job.status"] == "failed"  # stopped by the shutdown
