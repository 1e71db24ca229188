"""The processing workers are shared fairly: one caller's costly patterns cost that caller's
targets, not everyone's (issue 25, item 4)."""

from __future__ import annotations

import trio

from trio_batch import Config, Job, Options, Runner, Store, Target, open_runner
from trio_batch.fetchers import HttpFetcher, WorkerPool

from ..support.fakes import FakeClock
from ..support.local_server import LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

CATASTROPHIC_GREP = "(.+)+Z"  # exponential backtracking on a line without a Z: minutes
CONFIG = Config(ttl=1000, jobs_per_caller=4, jobs_total=8)


async def _workers_held(pool: WorkerPool, n: int) -> None:
    """Wait until ``n`` of the pool's workers are busy (polled: the pool sets no event)."""
    while pool._state().limiter.borrowed_tokens < n:  # noqa: ASYNC110 - a condition, polled
        await trio.sleep(0.01)


def _burner(server: LocalServer, i: int) -> list[Target]:
    return [Target(server.url(f"/generated?what=line&n=30&{i}"), Options(grep=CATASTROPHIC_GREP))]


async def _quick_job(runner: Runner, server: LocalServer, caller: str) -> Job:
    quick = Target(server.url("/text.txt"), Options(grep="match"))
    job_id, _ = await runner.submit(caller, "user", [quick])
    job = await runner.wait(job_id)
    assert job is not None
    return job


async def test_two_callers_burning_workers_do_not_hold_back_a_third(
    server: LocalServer, store: Store, clock: FakeClock
) -> None:
    # The issue's case: two callers' catastrophic regexes held both workers, and a third
    # caller's one-target grep waited for the whole process_timeout.
    fetcher = HttpFetcher(process_timeout=300, process_workers=3, process_workers_per_caller=1)
    async with open_runner(store, fetcher, CONFIG, now=clock) as runner:
        burning = [
            (await runner.submit(c, "user", _burner(server, i)))[0]
            for i, c in enumerate(["mallory", "trudy"])
        ]
        await _workers_held(fetcher.workers, 2)
        job = await _quick_job(runner, server, "carol")
        assert job.targets_done == 1 and job.targets_failed == 0
        for job_id in burning:  # still burning: carol did not wait for them
            found = await runner.status(job_id)
            assert found is not None and not found[0].is_terminal


async def test_one_caller_holds_at_most_its_share_of_the_workers(
    server: LocalServer, store: Store, clock: FakeClock
) -> None:
    fetcher = HttpFetcher(process_timeout=300, process_workers=2, process_workers_per_caller=1)
    async with open_runner(store, fetcher, CONFIG, now=clock) as runner:
        burning = [
            (await runner.submit("mallory", "user", _burner(server, i)))[0] for i in range(3)
        ]
        await _workers_held(fetcher.workers, 1)
        job = await _quick_job(runner, server, "carol")
        assert job.targets_done == 1 and job.targets_failed == 0
        # mallory's three jobs are all in flight, but only one of them has a worker.
        assert fetcher.workers._state().limiter.borrowed_tokens == 1
        assert fetcher.workers._state().callers["mallory"].statistics().tasks_waiting == 2
        for job_id in burning:
            found = await runner.status(job_id)
            assert found is not None and not found[0].is_terminal


def test_the_default_pool_has_more_workers_than_cores_and_shares_half() -> None:
    pool = WorkerPool()
    assert pool.workers >= 4
    assert pool.per_caller == pool.workers // 2
