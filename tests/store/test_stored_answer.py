"""A writer that counts its job's outcomes itself (``OutcomeWrite.stored_since``) is answered
``STORED`` rather than a new job per outcome, and the job as stored whenever that is not its
view with the outcome counted in: at the job's end, after a change elsewhere, for a job given
again under its id, a result stored as a failure; None once the lease has lapsed.

Every backend's answers are checked here through the ``JobStore`` interface; SQLite's and
PostgreSQL's own tests check that each does answer ``STORED`` where it can.
"""

from __future__ import annotations

from typing import Any

import pytest

from trio_batch import (
    Job,
    JobState,
    JobStore,
    OutcomeWrite,
    Result,
    Store,
    Target,
)
from trio_batch._model import new_job_id
from trio_batch.store import STORED, NewJob

T0 = 1_000_000.0
TTL = 100.0
CAPS: dict[str, Any] = {"ttl": TTL, "targets_per_job": 4, "jobs_per_caller": 2, "jobs_total": 3}


async def _create(store: JobStore, caller: str = "alice", n: int = 3, **kwargs: Any) -> Job:
    now = kwargs.pop("now", T0)
    targets = [Target(f"u:{i}") for i in range(n)]
    new = NewJob(caller, "default", targets, **{**CAPS, "status": JobState.RUNNING, **kwargs})
    job, _ = await store.create_job(new, now=now)
    return job


def _write(
    job: Job, idx: int, since: tuple[int, int], *, error: str | None = None, **kw: Any
) -> OutcomeWrite:
    result = None if error is not None else kw.pop("result", Result("x"))
    return OutcomeWrite(job.id, idx, result=result, error=error, seen=job, stored_since=since, **kw)


async def _as_stored(store: JobStore, answer: object, job_id: str, now: float) -> Job | None:
    """``answer`` if it is a job (checked against the store), else the stored job."""
    stored = await store.get_job(job_id, now=now)
    if answer is not STORED:
        assert answer == stored
    return stored


async def test_a_counting_writer_is_told_stored_or_the_job_and_the_last_the_job(
    job_store: JobStore,
) -> None:
    job = await _create(job_store)
    first = await job_store.record_outcome(_write(job, 0, (0, 0)), ttl=TTL, now=T0 + 1)
    stored = await _as_stored(job_store, first, job.id, T0 + 1)
    assert stored is not None and (stored.targets_done, stored.expires_at) == (1, T0 + 1 + TTL)
    # Told STORED, the writer counts the outcome in; told the job, it starts from that.
    seen, since = (job, (1, 0)) if first is STORED else (stored, (0, 0))
    second = await job_store.record_outcome(
        _write(seen, 1, since, error="Boom"), ttl=TTL, now=T0 + 2
    )
    stored = await _as_stored(job_store, second, job.id, T0 + 2)
    assert stored is not None and (stored.targets_done, stored.targets_failed) == (2, 1)
    seen, since = (seen, (since[0] + 1, since[1] + 1)) if second is STORED else (stored, (0, 0))
    last = await job_store.record_outcome(_write(seen, 2, since), ttl=TTL, now=T0 + 3)
    assert isinstance(last, Job)  # the job's end: always the job
    assert last == await job_store.get_job(job.id, now=T0 + 3)
    assert (last.status, last.targets_done, last.targets_failed) == (JobState.PARTIAL, 3, 1)


async def test_a_counting_writer_whose_view_is_stale_is_told_the_job_as_stored(
    job_store: JobStore,
) -> None:
    job = await _create(job_store, n=4)
    await job_store.record_outcome(_write(job, 0, (0, 0)), ttl=TTL, now=T0 + 1)
    assert await job_store.finish_job(job.id, JobState.CANCELLED, now=T0 + 2) is not None
    late = await job_store.record_outcome(_write(job, 1, (1, 0)), ttl=TTL, now=T0 + 3)
    assert isinstance(late, Job) and late == await job_store.get_job(job.id, now=T0 + 3)
    assert (late.status, late.targets_done) == (JobState.CANCELLED, 2)
    # A view that counts more (or fewer) outcomes than were stored is stale too.
    other = await _create(job_store, caller="bob", n=4)
    wrong = await job_store.record_outcome(_write(other, 0, (2, 0)), ttl=TTL, now=T0 + 4)
    assert isinstance(wrong, Job) and wrong == await job_store.get_job(other.id, now=T0 + 4)
    assert (wrong.status, wrong.targets_done) == (JobState.RUNNING, 1)


async def test_a_counting_writer_of_a_job_given_again_is_told_the_new_job(
    job_store: JobStore,
) -> None:
    old = await _create(job_store, job_id=new_job_id(), n=4)
    await job_store.record_outcome(_write(old, 0, (0, 0)), ttl=TTL, now=T0)
    await job_store.finish_job(old.id, JobState.CANCELLED, now=T0)
    assert await job_store.forget_job(old.id, now=T0) is not None
    again = await _create(job_store, caller="bob", n=4, job_id=old.id, now=T0)
    # The writer's view (one outcome counted into the old job) matches the new job's count
    # after its own first outcome: only the job's identity tells them apart.
    await job_store.record_outcome(OutcomeWrite(again.id, 0, result=Result("y")), ttl=TTL, now=T0)
    answer = await job_store.record_outcome(_write(old, 1, (1, 0)), ttl=TTL, now=T0)
    assert isinstance(answer, Job) and answer == await job_store.get_job(old.id, now=T0)
    assert (answer.caller, answer.targets_done) == ("bob", 2)


@pytest.mark.parametrize("counting", [True, False], ids=["counting", "not counting"])
@pytest.mark.parametrize(
    "differs", [{"caller_class": "admin"}, {"metadata": {"k": "new"}}], ids=["class", "labels"]
)
async def test_a_writer_of_a_job_given_again_by_its_caller_at_once_is_told_the_new_job(
    job_store: JobStore, differs: dict[str, Any], counting: bool
) -> None:
    # Same caller, as many targets, the same instant: only the class, or the labels (in the
    # idempotency key), tell the new job from the one seen.
    old = await _create(job_store, job_id=new_job_id(), n=4)
    first = await job_store.record_outcome(
        _write(old, 0, (0, 0)) if counting else OutcomeWrite(old.id, 0, Result("x"), seen=old),
        ttl=TTL,
        now=T0,
    )
    seen = old if counting else first
    assert isinstance(seen, Job)
    await job_store.finish_job(old.id, JobState.CANCELLED, now=T0)
    assert await job_store.forget_job(old.id, now=T0) is not None
    new = NewJob(
        "alice",
        differs.get("caller_class", "default"),
        [Target(f"u:{i}") for i in range(4)],
        **{**CAPS, "status": JobState.RUNNING, "job_id": old.id},
        metadata=differs.get("metadata"),
    )
    again, _ = await job_store.create_job(new, now=T0)
    await job_store.record_outcome(OutcomeWrite(again.id, 0, result=Result("y")), ttl=TTL, now=T0)
    late = OutcomeWrite(
        old.id, 1, result=Result("x"), seen=seen, stored_since=(1, 0) if counting else None
    )
    answer = await job_store.record_outcome(late, ttl=TTL, now=T0)
    stored = await job_store.get_job(old.id, now=T0)
    assert stored is not None and stored.targets_done == 2
    assert answer == stored, f"answered {answer!r}"


async def test_a_counting_writer_is_told_the_job_when_its_result_is_stored_as_a_failure(
    job_store: JobStore,
) -> None:
    job = await _create(job_store)
    write = _write(job, 0, (0, 0), result=Result("x" * 100), max_result_size=10)
    answer = await job_store.record_outcome(write, ttl=TTL, now=T0 + 1)
    assert isinstance(answer, Job) and answer == await job_store.get_job(job.id, now=T0 + 1)
    assert (answer.targets_done, answer.targets_failed) == (1, 1)


async def test_a_counting_writer_of_a_lapsed_job_is_told_none(job_store: JobStore) -> None:
    job = await _create(job_store)
    await job_store.record_outcome(_write(job, 0, (0, 0)), ttl=TTL, now=T0 + 1)
    lapsed = T0 + 1 + TTL
    assert await job_store.record_outcome(_write(job, 1, (1, 0)), ttl=TTL, now=lapsed) is None


def test_sqlite_answers_stored_for_every_write_as_counted_but_the_last(store: Store) -> None:
    job, _ = store.create_job(
        NewJob("alice", "default", [Target(f"u:{i}") for i in range(3)], **CAPS), now=T0
    )
    first = store.record_write(_write(job, 0, (0, 0)), TTL, T0)
    second = store.record_write(_write(job, 1, (1, 0), error="Boom"), TTL, T0 + 1)
    assert (first, second) == (STORED, STORED)
    last = store.record_write(_write(job, 2, (2, 1)), TTL, T0 + 2)
    assert isinstance(last, Job) and last == store.get_job(job.id, now=T0 + 2)
    assert (last.status, last.targets_done, last.targets_failed) == (JobState.PARTIAL, 3, 1)
    # Without stored_since: the job, as before.
    again, _ = store.create_job(
        NewJob("alice", "default", [Target("v:0"), Target("v:1")], **CAPS), now=T0
    )
    answer = store.record_write(OutcomeWrite(again.id, 0, result=Result("x"), seen=again), TTL, T0)
    assert isinstance(answer, Job) and answer == store.get_job(again.id, now=T0)


def test_sqlite_tells_a_shared_commits_counting_writer_the_job_of_a_result_stored_failed(
    store: Store,
) -> None:
    # The group commit's path (Store.record_outcomes), beside the lone writer's above.
    jobs = [
        store.create_job(NewJob(c, "default", [Target(f"{c}:0"), Target(f"{c}:1")], **CAPS))[0]
        for c in ("alice", "bob")
    ]
    big = _write(jobs[0], 0, (0, 0), result=Result("x" * 100), max_result_size=10)
    answers = store.record_outcomes([big, _write(jobs[1], 0, (0, 0))], ttl=TTL, now=T0)
    assert answers[1] is STORED
    assert isinstance(answers[0], Job) and answers[0] == store.get_job(jobs[0].id, now=T0)
    assert (answers[0].targets_done, answers[0].targets_failed) == (1, 1)
