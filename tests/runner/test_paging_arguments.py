"""The paging arguments of a runner's reads (``export``'s ``after``, ``watch``'s
``results_up_to``): any int reads the same on every backend, a number of the wrong type is a
TypeError at the call, never an OverflowError or a StoreUnavailable from the store."""

from __future__ import annotations

import math

import pytest

from trio_batch import Config, Job, JobStore, Target, open_runner

from ..support.fakes import FakeClock, ScriptedFetch

URLS = [f"https://example.test/{i}" for i in range(3)]


async def _done_job(runner: object) -> Job:
    from trio_batch import Runner

    assert isinstance(runner, Runner)
    job_id, _ = await runner.submit("alice", "user", [Target(u) for u in URLS])
    job = await runner.wait(job_id)
    assert job is not None
    return job


@pytest.mark.parametrize(
    ("after", "count"),
    [(2**31 - 1, 0), (2**31, 0), (2**63, 0), (10**400, 0), (-(2**63) - 1, 3), (-5, 3), (1, 1)],
    ids=["int32-max", "int32-max+1", "2**63", "10**400", "-2**63-1", "-5", "1"],
)
async def test_export_after_any_int_reads_the_same_on_every_backend(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock, after: int, count: int
) -> None:
    # 2**63 and past, and below -2**63, raised OverflowError in SQLite (not in PostgreSQL).
    async with open_runner(job_store, fetch, Config(), now=clock) as runner:
        job = await _done_job(runner)
        assert len([pair async for pair in runner.export(job, after=after)]) == count


@pytest.mark.parametrize("after", [True, 1.5, math.nan, "1"], ids=["True", "1.5", "nan", "str"])
async def test_export_after_that_is_no_int_is_a_type_error(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock, after: object
) -> None:
    # True read as index 1 in SQLite and as StoreUnavailable ("operator does not exist:
    # integer > boolean") in PostgreSQL.
    async with open_runner(job_store, fetch, Config(), now=clock) as runner:
        job = await _done_job(runner)
        with pytest.raises(TypeError, match="after"):
            [pair async for pair in runner.export(job, after=after)]  # type: ignore[arg-type]


@pytest.mark.parametrize("up_to", [2**63, 10**400], ids=["2**63", "10**400"])
async def test_watch_results_up_to_past_any_store_integer_reads_every_result(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock, up_to: int
) -> None:
    # Raised OverflowError in SQLite at the first read.
    async with open_runner(job_store, fetch, Config(), now=clock) as runner:
        job = await _done_job(runner)
        items = [item async for item in runner.watch(job.id, results_up_to=up_to)]
        assert len(items) == len(URLS) + 1
        assert all(getattr(item, "result", True) is not None for item in items)


@pytest.mark.parametrize(
    ("up_to", "error"),
    [(math.nan, TypeError), (math.inf, TypeError), (True, TypeError), (-1, ValueError)],
    ids=["nan", "inf", "True", "-1"],
)
async def test_watch_results_up_to_that_is_no_size_is_refused(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock, up_to: object, error: type
) -> None:
    # Each was taken: NaN and infinity by SQLite's comparison, -1 as "no result is read".
    async with open_runner(job_store, fetch, Config(), now=clock) as runner:
        job = await _done_job(runner)
        with pytest.raises(error, match="results_up_to"):
            [item async for item in runner.watch(job.id, results_up_to=up_to)]  # type: ignore[arg-type]
