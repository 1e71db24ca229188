"""The host-wide pause and the per-host limits, at each documented rule, seen from the fetcher
and the counting HTTPS server: which answers pause, for how long, and what one host is."""

from __future__ import annotations

import ssl
from urllib.parse import quote

import pytest
import trio
import trio.testing

from trio_batch import Target
from trio_batch.fetchers import (
    DestinationPolicy,
    FetchTimeout,
    HttpFetcher,
    HTTPStatusError,
    NetworkError,
)

from ..support.tls_server import (
    TLSServer,
    client_tls,
    loopback_names,
    tls_ca,
    tls_server,
    to_loopback,
    until,
)
from .test_politeness import figures

__all__ = ["client_tls", "tls_ca", "tls_server"]  # fixtures


async def _page_in(nursery: trio.Nursery, fetcher: HttpFetcher, url: str, out: list[str]) -> None:
    async def page() -> None:
        out.append((await fetcher(Target(url))).content)

    nursery.start_soon(page)


async def test_a_503_with_retry_after_pauses_the_host_for_every_request(
    tls_server: TLSServer, client_tls: ssl.SSLContext, mock_clock: trio.testing.MockClock
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, max_host_pause=60)
    done: list[str] = []
    async with fetcher:
        with pytest.raises(HTTPStatusError, match="503"):
            await fetcher(Target(tls_server.url("/unavailable?after=5")))
        assert figures(fetcher, "localhost")["paused"] == 5
        async with trio.open_nursery() as nursery:
            await _page_in(nursery, fetcher, tls_server.url("/page?n=1"), done)
            await until(lambda: figures(fetcher, "localhost").get("waiting") == 1)
            assert tls_server.count("/page?n=1") == 0
            mock_clock.jump(5)
    assert len(done) == 1 and tls_server.count("/page?n=1") == 1


async def test_a_wait_for_a_pause_extended_meanwhile_waits_for_the_new_end(
    tls_server: TLSServer, client_tls: ssl.SSLContext, mock_clock: trio.testing.MockClock
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, max_host_pause=60)
    done: list[str] = []
    late = tls_server.url("/hold?status=429&after=10")
    async with fetcher, trio.open_nursery() as nursery:

        async def held() -> None:
            with pytest.raises(HTTPStatusError, match="429"):
                await fetcher(Target(late))

        nursery.start_soon(held)
        await until(lambda: tls_server.now_in_flight("localhost") == 1)
        with pytest.raises(HTTPStatusError, match="429"):  # pauses the host for 5 s
            await fetcher(Target(tls_server.url("/throttle?after=5&times=1")))
        await _page_in(nursery, fetcher, tls_server.url("/page?n=1"), done)
        await until(lambda: figures(fetcher, "localhost").get("waiting") == 1)
        tls_server.release.set()  # the held request's 429 moves the pause's end to 10 s
        await until(lambda: figures(fetcher, "localhost")["throttled"] == 2)
        mock_clock.jump(5)
        await trio.testing.wait_all_tasks_blocked()
        assert figures(fetcher, "localhost")["in_flight"] == 0  # still waiting
        assert figures(fetcher, "localhost")["waiting"] == 1
        mock_clock.jump(5)
    assert len(done) == 1


async def test_a_success_begun_before_a_burst_does_not_reset_its_backoff(
    tls_server: TLSServer, client_tls: ssl.SSLContext, mock_clock: trio.testing.MockClock
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, max_host_pause=60)
    throttle = Target(tls_server.url("/throttle?times=2"))
    async with fetcher, trio.open_nursery() as nursery:
        nursery.start_soon(fetcher, Target(tls_server.url("/hold")))
        await until(lambda: tls_server.now_in_flight("localhost") == 1)
        with pytest.raises(HTTPStatusError, match="429"):
            await fetcher(throttle)  # the first 429: 1 s
        tls_server.release.set()  # the request begun before it succeeds now
        await until(
            lambda: tls_server.count("/hold") == 1 and not tls_server.in_flight["localhost"]
        )
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(1)
        with pytest.raises(HTTPStatusError, match="429"):
            await fetcher(throttle)  # the next 429 in a row: 2 s
        assert figures(fetcher, "localhost")["paused"] == 1 + 2


async def test_a_paused_host_is_remembered_past_1024_other_hosts(
    tls_server: TLSServer, client_tls: ssl.SSLContext, mock_clock: trio.testing.MockClock
) -> None:
    # Names resolving to a port where nothing listens: each takes its host's slot and fails
    # at once, so 1,100 hosts pass through the fetcher's memory in a moment.
    policy = DestinationPolicy(allow_networks=["127.0.0.1/32"], resolver=to_loopback)
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, max_host_pause=60, check_url=policy)
    done: list[str] = []
    async with fetcher:
        with pytest.raises(HTTPStatusError, match="429"):
            await fetcher(Target(tls_server.url("/throttle?after=30&times=1")))
        for i in range(1100):
            with pytest.raises(NetworkError):
                await fetcher(Target(f"http://h{i}.test:1/"))
        assert len(fetcher.host_figures()) == 1024
        async with trio.open_nursery() as nursery:
            await _page_in(nursery, fetcher, tls_server.url("/page?n=1"), done)
            await until(lambda: figures(fetcher, "localhost").get("waiting") == 1)
            assert tls_server.count("/page?n=1") == 0
            mock_clock.jump(30)
    assert len(done) == 1


async def test_spellings_of_one_host_share_its_limits(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    client_tls.check_hostname = False  # "127.1" is no name the certificate can carry
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, per_host_concurrency=1)
    done: list[str] = []
    async with fetcher, trio.open_nursery() as nursery:
        nursery.start_soon(fetcher, Target(tls_server.url("/hold")))
        await until(lambda: tls_server.now_in_flight("localhost") == 1)
        for n, host in enumerate(["127.0.0.1", "127.1", "2130706433"]):
            await _page_in(nursery, fetcher, tls_server.url(f"/page?n={n}", host), done)
        await until(lambda: figures(fetcher, "localhost").get("waiting") == 3)
        assert [f.host for f in fetcher.host_figures()] == ["localhost"]
        assert sum(tls_server.requests[f"/page?n={n}"] for n in range(3)) == 0
        tls_server.release.set()
    assert len(done) == 3
    assert set(tls_server.most_in_flight.values()) == {1}


async def test_the_fetch_clock_stops_for_a_pause_and_goes_on_with_what_was_left(
    tls_server: TLSServer, client_tls: ssl.SSLContext, mock_clock: trio.testing.MockClock
) -> None:
    fetcher = HttpFetcher(
        verify=client_tls, trust_env=False, timeout=1, max_host_pause=60, check_url=loopback_names()
    )
    trickle = quote(tls_server.url("/trickle", "a.test"), safe="")
    timed_out: list[FetchTimeout] = []

    async def redirected_into_a_pause() -> None:
        with pytest.raises(FetchTimeout) as info:
            await fetcher(Target(tls_server.url(f"/hold?status=302&to={trickle}")))
        timed_out.append(info.value)

    async with fetcher, trio.open_nursery() as nursery:
        with pytest.raises(HTTPStatusError, match="429"):  # a.test is paused for 5 s
            await fetcher(Target(tls_server.url("/throttle?after=5&times=1", "a.test")))
        nursery.start_soon(redirected_into_a_pause)
        await until(lambda: tls_server.now_in_flight("localhost") == 1)
        mock_clock.jump(0.6)  # 0.6 s of the fetch's 1 s go on its first hop
        tls_server.release.set()
        await until(lambda: figures(fetcher, "a.test").get("waiting") == 1)
        mock_clock.jump(4.4)  # the pause: not counted
        await until(lambda: tls_server.now_in_flight("a.test") == 1)
        assert not timed_out
        mock_clock.jump(0.5)  # 0.4 s were left
        await until(lambda: bool(timed_out))
