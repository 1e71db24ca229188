"""The processing workers are shared fairly, end to end: real worker processes burning on
catastrophic patterns for some callers do not hold back another caller's targets.

The pool is watched through events it sets as each caller's target asks for a worker and gets
one; what is checked is an order of completions (the quick job ends while the hostile ones
still burn), never a duration.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from trio_batch import Config, Job, Options, Runner, Store, Target, open_runner
from trio_batch.fetchers import HttpFetcher, WorkerPool
from trio_batch.fetchers._bounded import _Slot
from trio_batch.fetchers._options import Plan
from trio_batch.runner import current_caller

from ..support.fakes import FakeClock
from ..support.local_server import LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

CATASTROPHIC_GREP = "(.+)+Z"  # exponential backtracking on a line without a Z: minutes
#: Far longer than the quick job needs, even on a loaded machine: the hostile targets burn
#: until the test ends (then they are cancelled, and their workers killed).
HOSTILE_DEADLINE = 240.0
CONFIG = Config(ttl=1000, jobs_per_caller=4, jobs_total=12)


class WatchedPool(WorkerPool):
    """A :class:`WorkerPool` that counts, per caller, targets that asked for a worker and
    targets that got one, and lets a test wait for a count."""

    def __init__(self, workers: int, per_caller: int) -> None:
        super().__init__(workers, per_caller)
        self._counts: Counter[tuple[str, str | None]] = Counter()
        self._reached: defaultdict[tuple[str, str | None, int], trio.Event] = defaultdict(
            trio.Event
        )

    def _count(self, what: str, caller: str | None) -> None:
        self._counts[what, caller] += 1
        self._reached[what, caller, self._counts[what, caller]].set()

    async def reached(self, what: str, caller: str, n: int) -> None:
        """Wait until ``n`` of ``caller``'s targets ``asked`` for a worker, or ``got`` one."""
        await self._reached[what, caller, n].wait()

    @asynccontextmanager
    async def worker(self, plan: Plan) -> AsyncIterator[_Slot]:
        self._count("asked", current_caller())
        async with super().worker(plan) as slot:
            self._count("got", current_caller())
            yield slot


def _watched(workers: int, per_caller: int) -> tuple[HttpFetcher, WatchedPool]:
    fetcher = HttpFetcher(process_timeout=HOSTILE_DEADLINE)
    fetcher.workers = pool = WatchedPool(workers, per_caller)
    return fetcher, pool


async def _hostile(runner: Runner, server: LocalServer, caller: str, i: int) -> str:
    burner = Target(
        server.url(f"/generated?what=line&n=40&{caller}{i}"), Options(grep=CATASTROPHIC_GREP)
    )
    job_id, _ = await runner.submit(caller, "user", [burner])
    return job_id


async def _quick_job(runner: Runner, server: LocalServer, caller: str) -> Job:
    quick = Target(server.url("/text.txt"), Options(grep="match"))
    job_id, _ = await runner.submit(caller, "user", [quick])
    job = await runner.wait(job_id)
    assert job is not None
    return job


async def _still_burning(runner: Runner, job_ids: list[str]) -> None:
    for job_id in job_ids:
        found = await runner.status(job_id)
        assert found is not None and not found[0].is_terminal, found


async def test_a_caller_with_nothing_running_is_served_while_two_busy_callers_fill_the_pool(
    server: LocalServer, store: Store, clock: FakeClock
) -> None:
    # Two callers each hold their share (together, every worker of the pool) and have more
    # hostile targets queued: per-caller caps alone left carol waiting for one of them to end.
    fetcher, pool = _watched(workers=2, per_caller=1)
    async with open_runner(store, fetcher, CONFIG, now=clock) as runner:
        burning = [await _hostile(runner, server, c, i) for i in range(2) for c in ("m", "t")]
        for caller in ("m", "t"):
            await pool.reached("asked", caller, 2)
            await pool.reached("got", caller, 1)
        assert pool.statistics().total == pool.workers
        job = await _quick_job(runner, server, "carol")
        assert job.targets_done == 1 and job.targets_failed == 0
        await _still_burning(runner, burning)
        stats = pool.statistics()
        assert stats.held == {"m": 1, "t": 1} and stats.waiting == {"m": 1, "t": 1}


async def test_a_spare_worker_started_as_the_pool_filled_serves_the_next_caller_holding_none(
    server: LocalServer, store: Store, clock: FakeClock
) -> None:
    # Starting a worker takes seconds when the busy ones burn every core: the newcomer's
    # worker is started ahead, as the pool fills, and the newcomer does not start its own.
    fetcher, pool = _watched(workers=2, per_caller=1)
    async with open_runner(store, fetcher, CONFIG, now=clock) as runner:
        burning = [await _hostile(runner, server, c, 0) for c in ("m", "t")]
        for caller in ("m", "t"):
            await pool.reached("got", caller, 1)
        assert pool.statistics().spares == 1
        job = await _quick_job(runner, server, "carol")
        assert job.targets_done == 1 and job.targets_failed == 0
        assert pool.statistics().cold_starts == 2  # m's and t's, not carol's
        await _still_burning(runner, burning)


async def test_two_callers_burning_workers_do_not_hold_back_a_third(
    server: LocalServer, store: Store, clock: FakeClock
) -> None:
    fetcher, pool = _watched(workers=3, per_caller=1)
    async with open_runner(store, fetcher, CONFIG, now=clock) as runner:
        burning = [await _hostile(runner, server, c, 0) for c in ("m", "t")]
        for caller in ("m", "t"):
            await pool.reached("got", caller, 1)
        job = await _quick_job(runner, server, "carol")
        assert job.targets_done == 1 and job.targets_failed == 0
        await _still_burning(runner, burning)


async def test_one_caller_holds_at_most_its_share_of_the_workers(
    server: LocalServer, store: Store, clock: FakeClock
) -> None:
    fetcher, pool = _watched(workers=2, per_caller=1)
    async with open_runner(store, fetcher, CONFIG, now=clock) as runner:
        burning = [await _hostile(runner, server, "m", i) for i in range(3)]
        await pool.reached("asked", "m", 3)
        await pool.reached("got", "m", 1)
        job = await _quick_job(runner, server, "carol")
        assert job.targets_done == 1 and job.targets_failed == 0
        # m's three jobs are all in flight, but only one of them has a worker.
        stats = pool.statistics()
        assert stats.held == {"m": 1} and stats.waiting == {"m": 2}
        await _still_burning(runner, burning)


def test_the_default_pool_has_more_workers_than_cores_shares_half_and_bursts_to_twice() -> None:
    pool = WorkerPool()
    assert pool.workers >= 4
    assert pool.per_caller == pool.workers // 2
    assert pool.ceiling == 2 * pool.workers
