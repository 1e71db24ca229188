"""A shared commit answers each write as writes made one after another would, on every backend.

The same random batches (seeded) go to two sets of identical jobs in one store: as one
``record_outcomes`` to the first, and a write at a time to the second. Every answer and every
stored row must match: a job's several writes in a batch, a job that ends mid-batch, a
target written twice, a target already stored or missing, a lapsed, cancelled or unknown
job, a malformed write.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from trio_batch import Job, JobState, OutcomeWrite, Result, Store, Target
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresStore

from ..support.fakes import T0
from .test_group_commit import TTL, _read, sql_store, stored_row

__all__ = ["sql_store"]  # the fixture, each backend's store

#: The jobs of a scenario: caller suffix, targets, and what is done to it first.
_JOBS = (
    ("a", 3, None),
    ("b", 2, "stored"),
    ("c", 1, None),
    ("d", 2, "lapsed"),
    ("e", 2, "cancelled"),
)
_CAPS: dict[str, Any] = {"ttl": TTL, "targets_per_job": 8, "jobs_per_caller": 1, "jobs_total": 100}


def _scenario(store: Store | PostgresStore, prefix: str) -> list[str]:
    """The scenario's jobs, made afresh under callers named with ``prefix``: their ids."""
    ids = []
    for name, n, state in _JOBS:
        made = T0 - TTL - 1 if state == "lapsed" else T0
        new = NewJob(
            f"{prefix}-{name}",
            "user",
            [Target(f"https://{name}.test/{i}") for i in range(n)],
            status=JobState.RUNNING,
            webhook_url="https://hooks.test/x",  # its end is an event in the outbox
            **_CAPS,
        )
        job, _ = store.create_job(new, now=made)
        if state == "stored":
            store.record_outcomes([OutcomeWrite(job.id, 0, result=Result("pre"))], ttl=TTL, now=T0)
        elif state == "cancelled":
            assert store.finish_job(job.id, JobState.CANCELLED, now=T0) is not None
        ids.append(job.id)
    return ids


def _writes(rng: random.Random, ids: list[str]) -> list[OutcomeWrite]:
    """A random batch over ``ids`` (and an unknown job): targets 0 to 3 (3 never exists),
    successes, failures and a malformed write now and then."""
    writes = []
    for _ in range(rng.randint(1, 10)):
        job = rng.choice([*ids, "unknown-job-id-000000"])
        idx = rng.randint(0, 3)
        kind = rng.choice(["result", "result", "error", "error", "malformed"])
        if kind == "result":
            writes.append(OutcomeWrite(job, idx, result=Result(f"r{rng.randint(0, 9)}")))
        elif kind == "error":
            writes.append(OutcomeWrite(job, idx, error="boom", attempts=rng.randint(1, 3)))
        else:
            writes.append(OutcomeWrite(job, idx))
    return writes


def _seen(answer: Job | Exception | None) -> Any:
    """An answer, with its job id left out (the two sets' ids differ)."""
    if isinstance(answer, Job):
        return (
            answer.status,
            answer.error,
            answer.targets_total,
            answer.targets_done,
            answer.targets_failed,
            answer.updated_at,
            answer.expires_at,
        )
    return type(answer)


@pytest.mark.parametrize("seed", range(40))
def test_a_shared_commit_answers_as_writes_made_one_after_another(
    sql_store: Store | PostgresStore, seed: int
) -> None:
    store = sql_store
    together, alone = _scenario(store, f"t{seed}"), _scenario(store, f"a{seed}")
    rng = random.Random(seed)
    twin = dict(zip(together, alone, strict=True))
    now = T0 + 1
    for _ in range(3):  # three batches in a row: later ones meet what earlier ones stored
        writes = _writes(rng, together)
        batch = store.record_outcomes(writes, ttl=TTL, now=now)
        one_by_one = [
            store.record_outcomes(
                [OutcomeWrite(twin.get(w.job_id, w.job_id), *_rest(w))], ttl=TTL, now=now
            )[0]
            for w in writes
        ]
        assert [_seen(a) for a in batch] == [_seen(a) for a in one_by_one], writes
        now += 1
    for job_id, twin_id in twin.items():
        assert stored_row(store, job_id) == stored_row(store, twin_id)
        assert _event(store, job_id) == _event(store, twin_id)


def _event(store: Store | PostgresStore, job_id: str) -> list[Any]:
    """The job's end event as the outbox holds it."""
    sql = (
        "SELECT event, job_status, targets_total, targets_done, targets_failed, event_at "
        "FROM outbox WHERE job_id = ?"
    )
    return [tuple(row) for row in _read(store, sql, (job_id,))]


def _rest(write: OutcomeWrite) -> tuple[Any, ...]:
    """``write``'s fields after its job id."""
    return (
        write.idx,
        write.result,
        write.error,
        write.hint,
        write.attempts,
        write.max_result_size,
    )
