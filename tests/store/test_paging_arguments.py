"""The paging arguments of a store's reads (``limit``, ``batch_size``, ``start``, ``after``,
``max_bytes``, ``results_up_to``), however they are passed: any int in range reads the same on
every backend, past the most a store binds it reads as that most; a non-int is a TypeError and
a count below its least a ValueError, never an OverflowError (SQLite) or a StoreUnavailable
("bigint out of range", PostgreSQL) that reads as worth a retry."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from trio_batch import Config, Job, JobStore, Target, open_runner

from ..support.fakes import FakeClock, ScriptedFetch

Read = Callable[[JobStore, Job, float], Awaitable[Any]]

#: Each read with an argument past what a store binds, and how many rows it still answers.
PAST: dict[str, tuple[Read, int]] = {
    "list_jobs limit": (lambda s, j, now: s.list_jobs(now=now, limit=2**63), 1),
    "list_caller_jobs limit": (
        lambda s, j, now: s.list_caller_jobs("alice", now=now, limit=10**400),
        1,
    ),
    "retries limit": (lambda s, j, now: s.retries(j.id, caller="alice", now=now, limit=2**63), 0),
    "purge batch_size": (lambda s, j, now: s.purge_expired(now=now, batch_size=2**63), 0),
    "get_targets_after after (positional)": (
        lambda s, j, now: s.get_targets_after(j.id, 2**63, now=now, limit=5),
        0,
    ),
    "get_targets_after max_bytes": (
        lambda s, j, now: s.get_targets_after(j.id, -1, now=now, limit=2**64, max_bytes=2**63),
        2,
    ),
    "get_outcomes start": (
        lambda s, j, now: s.get_outcomes(j.id, now=now, start=2**63, limit=5),
        0,
    ),
    "get_outcomes results_up_to": (
        lambda s, j, now: s.get_outcomes(j.id, now=now, start=0, limit=5, results_up_to=2**63),
        2,
    ),
}


def _rows(answer: Any) -> int:
    if isinstance(answer, int):
        return answer
    if isinstance(answer, tuple):  # (job, targets)
        return len(answer[1])
    return len(answer)


async def _job(runner: Any) -> Job:
    job_id, _ = await runner.submit(
        "alice", "user", [Target("https://e.test/a"), Target("https://e.test/b")]
    )
    job = await runner.wait(job_id)
    assert job is not None
    return job


@pytest.mark.parametrize("name", list(PAST))
async def test_a_paging_argument_past_what_a_store_binds_reads_as_its_most(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock, name: str
) -> None:
    read, rows = PAST[name]
    async with open_runner(job_store, fetch, Config(), now=clock) as runner:
        job = await _job(runner)
        assert _rows(await read(job_store, job, clock())) == rows


BAD: dict[str, tuple[Read, type[Exception]]] = {
    "limit True": (lambda s, j, now: s.list_jobs(now=now, limit=True), TypeError),
    "limit -1": (lambda s, j, now: s.list_jobs(now=now, limit=-1), ValueError),
    "limit 2.5": (lambda s, j, now: s.list_caller_jobs("alice", now=now, limit=2.5), TypeError),
    "batch_size nan": (lambda s, j, now: s.purge_expired(now=now, batch_size=math.nan), TypeError),
    "batch_size 0": (lambda s, j, now: s.purge_expired(now=now, batch_size=0), ValueError),
    "after nan": (
        lambda s, j, now: s.get_targets_after(j.id, math.nan, now=now, limit=5),
        TypeError,
    ),
    "max_bytes -1": (
        lambda s, j, now: s.get_targets_after(j.id, -1, now=now, limit=5, max_bytes=-1),
        ValueError,
    ),
}


@pytest.mark.parametrize("name", list(BAD))
async def test_a_paging_argument_no_store_can_read_is_a_typed_error(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock, name: str
) -> None:
    read, error = BAD[name]
    async with open_runner(job_store, fetch, Config(), now=clock) as runner:
        job = await _job(runner)
        with pytest.raises(error, match=name.split()[0]):
            await read(job_store, job, clock())
