"""Per-target retries in the serial drain, on trio's mock clock: every delay is exact.

The fetch functions here record the (mock) time of each attempt, so the waits between attempts
are checked to the second, with no wall-clock threshold anywhere.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing

from trio_batch import (
    Config,
    JobState,
    Result,
    RetryableError,
    RetryNotice,
    RetryPolicy,
    Store,
    Target,
    TargetState,
    open_runner,
)
from trio_batch.fetchers import HttpFetcher

from ..support.fakes import FakeClock, urls
from ..support.local_server import LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

NO_JITTER = RetryPolicy(attempts=3, first_delay=1.0, max_delay=30.0, multiplier=2.0, jitter=0)


@dataclass
class Flaky:
    """Fails each URL's first ``fails`` attempts with ``error``, then returns a Result.

    Records the mock time of every attempt per URL, and the peak number of attempts in flight
    for one job (the URL's first path segment names the job).
    """

    fails: int = 2
    error: type[Exception] | None = None
    retry_after: float | None = None
    attempts: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    order: list[str] = field(default_factory=list)
    in_flight: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    peak_per_job: int = 0
    gate: trio.Event | None = None
    started: trio.Event = field(default_factory=trio.Event)

    async def __call__(self, target: Target) -> Result:
        job = target.url.split("/")[3]  # https://example.test/<job>/<target>
        self.in_flight[job] += 1
        self.peak_per_job = max(self.peak_per_job, self.in_flight[job])
        try:
            self.attempts[target.url].append(trio.current_time())
            self.order.append(target.url)
            self.started.set()
            if self.gate is not None:
                await self.gate.wait()
            await trio.sleep(0.001)  # some work, so that jobs interleave
            if len(self.attempts[target.url]) <= self.fails:
                if self.error is not None:
                    raise self.error("not retryable")
                raise RetryableError(
                    f"try {len(self.attempts[target.url])} failed",
                    hint="the server was busy",
                    retry_after=self.retry_after,
                )
            return Result(f"got {target.url}")
        finally:
            self.in_flight[job] -= 1


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in itertools.pairwise(times)]


async def _run(
    store: Store, fetch: Flaky, clock: FakeClock, config: Config, *urls_: str
) -> tuple[JobState, list[tuple[str, int, str | None, str | None]]]:
    async with open_runner(store, fetch, config, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls(*urls_))
        job = await runner.wait(job_id)
        status = await runner.status(job_id)
    assert job is not None and status is not None
    return job.status, [(str(t.status), t.attempts, t.error, t.hint) for t in status[1]]


async def test_a_target_that_succeeds_on_its_third_attempt_is_done_after_two_waits(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    fetch = Flaky(fails=2)
    status, targets = await _run(store, fetch, clock, Config(retry=NO_JITTER), "a/x")
    assert status is JobState.DONE
    assert targets == [("done", 3, None, None)]
    # first_delay 1 s, then doubled: 1 s and 2 s (plus the 1 ms of work in each attempt).
    assert _gaps(next(iter(fetch.attempts.values()))) == [1.001, 2.001]


async def test_exhausted_attempts_store_the_last_failure(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    fetch = Flaky(fails=10)
    status, targets = await _run(store, fetch, clock, Config(retry=NO_JITTER), "a/x", "a/y")
    assert status is JobState.FAILED
    assert targets[0] == ("failed", 3, "RetryableError: try 3 failed", "the server was busy")
    assert [len(times) for times in fetch.attempts.values()] == [3, 3]


async def test_a_non_retryable_error_fails_at_once(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    fetch = Flaky(fails=1, error=ValueError)
    status, targets = await _run(store, fetch, clock, Config(retry=NO_JITTER), "a/x")
    assert status is JobState.FAILED
    assert targets == [("failed", 1, "ValueError: not retryable", None)]


async def test_without_a_policy_a_retryable_error_fails_at_once(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    fetch = Flaky(fails=1)
    status, targets = await _run(store, fetch, clock, Config(), "a/x")
    assert status is JobState.FAILED and targets[0][:2] == ("failed", 1)


@pytest.mark.parametrize(("retry_after", "wait"), [(10.0, 10.0), (0.2, 1.0), (500.0, 30.0)])
async def test_retry_after_is_a_floor_and_max_delay_a_cap(
    store: Store,
    clock: FakeClock,
    autojump_clock: trio.testing.MockClock,
    retry_after: float,
    wait: float,
) -> None:
    fetch = Flaky(fails=1, retry_after=retry_after)
    status, _ = await _run(store, fetch, clock, Config(retry=NO_JITTER), "a/x")
    assert status is JobState.DONE
    assert _gaps(next(iter(fetch.attempts.values()))) == [wait + 0.001]


async def test_a_retry_after_too_large_for_a_float_is_ignored_and_the_target_retried(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    # An int past any float once failed the whole job ("could not store the outcome").
    fetch = Flaky(fails=1, retry_after=10**400)
    status, targets = await _run(store, fetch, clock, Config(retry=NO_JITTER), "a/x", "a/y")
    assert status is JobState.DONE
    assert targets == [("done", 2, None, None), ("done", 2, None, None)]
    assert _gaps(fetch.attempts["https://example.test/a/x"]) == [1.001]  # the policy's own


async def test_jitter_spreads_the_waits_within_its_bounds(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    policy = RetryPolicy(attempts=2, first_delay=4.0, max_delay=60.0, jitter=0.5)
    fetch = Flaky(fails=1)
    config = Config(retry=policy, targets_per_job=32)
    status, _ = await _run(store, fetch, clock, config, *(f"a/{i}" for i in range(30)))
    assert status is JobState.DONE
    waits = [_gaps(times)[0] - 0.001 for times in fetch.attempts.values()]
    assert all(2.0 <= w <= 6.0 for w in waits), waits
    assert len({round(w, 6) for w in waits}) > 1  # spread, not one fixed delay


async def test_a_timeout_is_retried(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    calls = 0

    async def slow_then_fast(target: Target) -> Result:
        nonlocal calls
        calls += 1
        if calls == 1:
            await trio.sleep_forever()
        return Result("second time lucky")

    config = Config(retry=NO_JITTER, target_timeout=5)
    async with open_runner(store, slow_then_fast, config, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a/x"))
        job = await runner.wait(job_id)
        status = await runner.status(job_id)
    assert job is not None and job.status is JobState.DONE
    assert status is not None and status[1][0].attempts == 2


@pytest.fixture
def patient_autojump() -> trio.testing.MockClock:
    """A mock clock that jumps only after the run has been idle for 50 ms of real time.

    With the plain autojump clock, time would also jump while a store call is on the store
    thread (the run is idle then), and "the cancel cut the wait short" could not be told from
    "time jumped while the outcome was being stored".
    """
    return trio.testing.MockClock(autojump_threshold=0.05)


async def test_cancel_during_a_wait_stores_the_last_failure_at_once(
    store: Store, clock: FakeClock, patient_autojump: trio.testing.MockClock
) -> None:
    policy = RetryPolicy(attempts=3, first_delay=100.0, max_delay=100.0, jitter=0)
    fetch = Flaky(fails=10)
    async with open_runner(store, fetch, Config(retry=policy), now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a/x", "a/y"))
        await fetch.started.wait()
        await trio.sleep(10)  # well inside the 100 s wait after the first attempt
        cancelled_at = trio.current_time()
        assert await runner.cancel(job_id)
        job = await runner.wait(job_id)
        stopped_at = trio.current_time()
        status = await runner.status(job_id)
    assert stopped_at - cancelled_at < 1  # the wait was cut, not sat out
    assert job is not None and job.status is JobState.CANCELLED
    assert status is not None
    first, second = status[1]
    assert (first.status, first.attempts) == (TargetState.FAILED, 1)
    assert first.hint is not None and "cancelled after attempt 1 of 3" in first.hint
    assert "the server was busy" in first.hint
    assert second.status is TargetState.PENDING
    assert list(fetch.attempts) == ["https://example.test/a/x"]


async def test_cancel_during_an_attempt_lets_it_finish_and_starts_no_other(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    fetch = Flaky(fails=10, gate=trio.Event())
    async with open_runner(store, fetch, Config(retry=NO_JITTER), now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a/x", "a/y"))
        await fetch.started.wait()
        assert await runner.cancel(job_id)
        fetch.gate.set()  # type: ignore[union-attr]
        await runner.wait(job_id)
        status = await runner.status(job_id)
    assert status is not None
    first, second = status[1]
    assert (first.status, first.attempts, first.error) == (
        TargetState.FAILED,
        1,
        "RetryableError: try 1 failed",
    )
    assert first.hint is not None and "not retried" in first.hint
    assert second.status is TargetState.PENDING
    assert len(fetch.attempts["https://example.test/a/x"]) == 1


async def test_shutdown_during_a_wait_fails_the_job_and_stores_nothing_more(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    policy = RetryPolicy(attempts=3, first_delay=100.0, max_delay=100.0, jitter=0)
    fetch = Flaky(fails=10)
    async with open_runner(store, fetch, Config(retry=policy), now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a/x"))
        await fetch.started.wait()
        await trio.sleep(10)
    found = store.get_status(job_id, now=clock())
    assert found is not None
    job, targets = found
    assert (job.status, job.error) == (JobState.FAILED, "shutdown")
    assert (targets[0].status, targets[0].attempts) == (TargetState.PENDING, 0)
    assert len(fetch.attempts["https://example.test/a/x"]) == 1


async def test_concurrent_jobs_keep_order_and_one_attempt_in_flight_each(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    fetch = Flaky(fails=1)
    notices: list[RetryNotice] = []
    config = Config(retry=NO_JITTER, jobs_total=4, jobs_per_caller=4)
    async with open_runner(store, fetch, config, now=clock, on_retry=notices.append) as runner:
        ids = []
        for j in range(4):
            job_id, _ = await runner.submit("alice", "user", urls(*(f"j{j}/{i}" for i in range(3))))
            ids.append(job_id)
        jobs = [await runner.wait(job_id) for job_id in ids]
    assert all(job is not None and job.status is JobState.DONE for job in jobs)
    assert fetch.peak_per_job == 1
    for j in range(4):
        mine = [url for url in fetch.order if url.startswith(f"https://example.test/j{j}/")]
        # Each target twice (a failure, then the retry), before the next target starts.
        assert mine == [f"https://example.test/j{j}/{i}" for i in range(3) for _ in range(2)]
    assert len(notices) == 12
    assert {(n.attempt, n.attempts, n.delay) for n in notices} == {(1, 3, 1.0)}
    assert notices[0].error == "RetryableError: try 1 failed"


async def test_the_fetcher_retries_a_503_until_the_server_recovers(
    store: Store, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    # The server asks for 1 s; max_delay caps the retry's wait and max_host_pause the host's
    # pause to 10 ms, so the test stays quick.
    policy = RetryPolicy(attempts=4, first_delay=0.001, max_delay=0.01, jitter=0)
    url = server.url("/flaky?fail=2&status=503&after=1")
    fetcher = HttpFetcher(max_host_pause=0.01)
    async with open_runner(store, fetcher, Config(retry=policy)) as runner:
        job_id, _ = await runner.submit("alice", "user", [Target(url)])
        job = await runner.wait(job_id)
        status = await runner.status(job_id)
    assert job is not None and job.status is JobState.DONE
    assert status is not None
    target = status[1][0]
    assert (target.attempts, target.result.content if target.result else None) == (3, "fine now")
    assert server.count("/flaky?fail=2&status=503&after=1") == 3


async def test_an_on_retry_hook_that_raises_fails_neither_the_target_nor_the_job(
    store: Store, clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    seen: list[RetryNotice] = []

    def broken(notice: RetryNotice) -> None:
        seen.append(notice)
        raise RuntimeError("the progress display's own bug")

    fetch = Flaky(fails=1)
    async with open_runner(store, fetch, Config(retry=NO_JITTER), now=clock, on_retry=broken) as r:
        job_id, _ = await r.submit("alice", "user", urls("a/1", "a/2"))
        job = await r.wait(job_id)
    assert job is not None and job.status is JobState.DONE
    assert [n.url for n in seen] == ["https://example.test/a/1", "https://example.test/a/2"]
    found = store.get_status(job_id, now=clock())
    assert found is not None
    assert [(t.status, t.attempts) for t in found[1]] == [(TargetState.DONE, 2)] * 2
