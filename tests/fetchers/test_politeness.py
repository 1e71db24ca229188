"""Politeness per host, shared by every job of a runner: at most N in flight, a host-wide pause
on 429, a rate; never holding back another host. Against a real HTTPS server that counts."""

from __future__ import annotations

import ssl

import pytest
import trio
import trio.testing

from trio_batch import Config, JobState, RetryPolicy, Store, Target, open_runner
from trio_batch.fetchers import HttpFetcher, HTTPStatusError
from trio_batch.fetchers._hosts import Hosts, Politeness

from ..support.fakes import FakeClock
from ..support.tls_server import (
    TLSServer,
    client_tls,
    loopback_names,
    tls_ca,
    tls_server,
    until,
)

__all__ = ["client_tls", "tls_ca", "tls_server"]  # fixtures


def figures(fetcher: HttpFetcher, host: str) -> dict[str, float]:
    for f in fetcher.host_figures():
        if f.host == host:
            return {
                "requests": f.requests,
                "throttled": f.throttled,
                "paused": f.paused_seconds,
                "in_flight": f.in_flight,
                "waiting": f.waiting,
            }
    return {}


async def test_per_host_concurrency_holds_across_jobs_and_spares_other_hosts(
    store: Store, tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    fetcher = HttpFetcher(
        verify=client_tls, trust_env=False, per_host_concurrency=2, check_url=loopback_names()
    )
    # Six jobs on "localhost" and three on "a.test": the same server under two host names.
    jobs = [[Target(tls_server.url(f"/hold?j={j}&i={i}")) for i in range(2)] for j in range(6)]
    jobs += [[Target(tls_server.url(f"/page?n={j}", "a.test"))] for j in range(3)]
    async with open_runner(store, fetcher, Config(jobs_total=9)) as runner:
        ids = [(await runner.submit(f"c{i}", "user", job))[0] for i, job in enumerate(jobs)]
        await until(lambda: tls_server.now_in_flight("localhost") == 2)
        # The held host is full; the other host's jobs finish meanwhile.
        for job_id in ids[6:]:
            job = await runner.wait(job_id)
            assert job is not None and job.status is JobState.DONE
        assert figures(fetcher, "localhost")["waiting"] == 4
        tls_server.release.set()
        done = [await runner.wait(job_id) for job_id in ids[:6]]
    assert all(job is not None and job.status is JobState.DONE for job in done)
    assert tls_server.most_in_flight["localhost"] == 2
    assert sum(1 for p in tls_server.requests if p.startswith("/hold")) == 12


async def test_a_429_pauses_every_job_on_that_host_and_none_on_another(
    store: Store,
    tls_server: TLSServer,
    client_tls: ssl.SSLContext,
    clock: FakeClock,
    mock_clock: trio.testing.MockClock,
) -> None:
    # trio's clock stands still: the pause lasts until the test moves it.
    fetcher = HttpFetcher(
        verify=client_tls, trust_env=False, max_host_pause=60, check_url=loopback_names()
    )
    retry = RetryPolicy(attempts=2, first_delay=0.001, max_delay=60, jitter=0)
    throttle = "/throttle?after=5&times=1"
    async with open_runner(store, fetcher, Config(retry=retry), now=clock) as runner:
        first, _ = await runner.submit("t", "user", [Target(tls_server.url(throttle))])
        await until(lambda: figures(fetcher, "localhost").get("throttled") == 1)
        same = [
            (await runner.submit(f"s{j}", "user", [Target(tls_server.url(f"/page?n=s{j}"))]))[0]
            for j in range(3)
        ]
        other = [
            (
                await runner.submit(
                    f"o{j}", "user", [Target(tls_server.url(f"/page?n=o{j}", "a.test"))]
                )
            )[0]
            for j in range(3)
        ]
        for job_id in other:
            job = await runner.wait(job_id)
            assert job is not None and job.status is JobState.DONE
        await until(lambda: figures(fetcher, "localhost")["waiting"] == 3)
        assert [tls_server.count(f"/page?n=s{j}") for j in range(3)] == [0, 0, 0]
        assert figures(fetcher, "localhost")["paused"] == 5
        mock_clock.jump(5)
        done = [await runner.wait(job_id) for job_id in [first, *same]]
        status = await runner.status(first)
    assert all(job is not None and job.status is JobState.DONE for job in done)
    assert status is not None and status[1][0].attempts == 2
    assert tls_server.count(throttle) == 2


async def test_a_burst_of_429s_doubles_the_pause_once_and_retry_after_0_still_pauses(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hosts = Hosts(Politeness(concurrency=4, first_pause=1, max_pause=30))
    async with hosts.slot("h") as a, hosts.slot("h") as b, hosts.slot("h") as c:
        # Three requests in flight together all answer 429: one burst, one step.
        assert hosts.throttled(a, 0.0) == 1
        assert hosts.throttled(b, 0.0) == 1
        assert hosts.throttled(c, None) == 1
    start = trio.current_time()
    async with hosts.slot("h") as d:
        assert trio.current_time() - start == pytest.approx(1)  # waited out the pause
        assert hosts.throttled(d, 0.0) == 2  # a 429 after the pause: the next step
    async with hosts.slot("h") as e:
        assert hosts.throttled(e, 3600.0) == 30  # bounded by max_pause
    async with hosts.slot("h") as f:
        hosts.succeeded(f)
    async with hosts.slot("h") as g:
        assert hosts.throttled(g, None) == 1  # a success started the backoff over
    [h] = hosts.figures()
    assert (h.requests, h.throttled) == (7, 6)
    assert h.paused_seconds == pytest.approx(1 + 2 + 30 + 1)


async def test_the_rate_spaces_request_starts_per_host(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hosts = Hosts(Politeness(concurrency=10, rate=4))
    starts: dict[str, list[float]] = {"a": [], "b": []}

    async def one(name: str) -> None:
        async with hosts.slot(name):
            starts[name].append(trio.current_time())

    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        for name in ("a", "a", "a", "b", "b"):
            nursery.start_soon(one, name)
    assert [round(t - t0, 6) for t in starts["a"]] == [0, 0.25, 0.5]
    assert [round(t - t0, 6) for t in starts["b"]] == [0, 0.25]


async def test_a_cancelled_wait_for_a_host_leaves_no_trace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hosts = Hosts(Politeness(concurrency=1))
    async with hosts.slot("h"):
        with trio.move_on_after(1):
            async with hosts.slot("h"):
                raise AssertionError("the host has one place, and it is taken")
        [h] = hosts.figures()
        assert (h.in_flight, h.waiting) == (1, 0)
    [h] = hosts.figures()
    assert (h.in_flight, h.waiting, h.requests) == (0, 0, 1)


def test_bad_politeness_settings_are_refused() -> None:
    for kwargs in (
        {"per_host_concurrency": 0},
        {"per_host_concurrency": 1001},
        {"per_host_rate": 0},
        {"max_host_pause": 0},
    ):
        with pytest.raises(ValueError):
            HttpFetcher(**kwargs)  # type: ignore[arg-type]
    # The edges of the documented range, 1 to 1000, are taken.
    assert HttpFetcher(per_host_concurrency=1).politeness.concurrency == 1
    assert HttpFetcher(per_host_concurrency=1000).politeness.concurrency == 1000


async def test_waiting_out_a_pause_longer_than_the_timeout_does_not_time_the_fetch_out(
    tls_server: TLSServer, client_tls: ssl.SSLContext, mock_clock: trio.testing.MockClock
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, timeout=1, max_host_pause=60)
    results: list[str] = []

    async def page() -> None:
        results.append((await fetcher(Target(tls_server.url("/page?n=1")))).content)

    async with fetcher:
        with pytest.raises(HTTPStatusError):
            await fetcher(Target(tls_server.url("/throttle?after=5&times=1")))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(page)
            await until(lambda: figures(fetcher, "localhost").get("waiting") == 1)
            mock_clock.jump(5)  # past the pause, and past the fetch's 1 s
    assert len(results) == 1 and "Page 1" in results[0]


async def test_a_cancelled_wait_for_the_rate_keeps_no_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # One start every 10 s. A request cancelled while it waits for its turn must not hold
    # that turn: the next request starts at the first free turn, not one after it.
    hosts = Hosts(Politeness(concurrency=10, rate=0.1))
    t0 = trio.current_time()
    async with hosts.slot("h"):
        pass  # starts at once; the next turn is at 10 s
    with trio.move_on_after(1) as waited:
        async with hosts.slot("h"):
            raise AssertionError("the next turn is 10 s away")
    assert waited.cancelled_caught
    async with hosts.slot("h"):
        started = trio.current_time() - t0
    assert started == pytest.approx(10)
    [h] = hosts.figures()
    assert (h.in_flight, h.waiting, h.requests) == (0, 0, 2)


async def test_a_cancelled_wait_for_the_rate_moves_the_later_turns_up_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hosts = Hosts(Politeness(concurrency=10, rate=0.1))  # one start every 10 s
    t0 = trio.current_time()
    starts: list[tuple[str, float]] = []
    scopes = {name: trio.CancelScope() for name in "abcd"}

    async def one(name: str, task_status: trio.TaskStatus[None]) -> None:
        with scopes[name]:
            task_status.started()
            async with hosts.slot("h"):
                starts.append((name, round(trio.current_time() - t0, 6)))

    async with trio.open_nursery() as nursery:
        for name in "abc":
            await nursery.start(one, name)
            await trio.testing.wait_all_tasks_blocked()  # each in the queue before the next
        await trio.sleep(1)
        scopes["b"].cancel()  # b gives up its turn (10 s): c takes it, d the one after
        await nursery.start(one, "d")
    assert starts == [("a", 0), ("c", 10), ("d", 20)]
