"""robots.txt, obeyed on request: fetched once per origin through the same client and limits,
a disallowed target failing with a hint. Against a real HTTPS server that counts."""

from __future__ import annotations

import ssl

import pytest

from trio_batch import Config, JobState, Store, Target, open_runner
from trio_batch.fetchers import FetchError, HttpFetcher, RobotsDisallowed

from ..support.tls_server import TLSServer, client_tls, tls_ca, tls_server

__all__ = ["client_tls", "tls_ca", "tls_server"]  # fixtures

ROBOTS = "User-agent: *\nDisallow: /private\n"


async def test_a_disallowed_target_fails_with_a_hint_and_is_never_requested(
    store: Store, tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    tls_server.robots = ROBOTS
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, obey_robots=True)
    jobs = [
        [Target(tls_server.url(f"/page?n={j}")), Target(tls_server.url(f"/private/{j}"))]
        for j in range(3)
    ]
    async with open_runner(store, fetcher, Config()) as runner:
        ids = [(await runner.submit(f"c{j}", "user", job))[0] for j, job in enumerate(jobs)]
        for job_id in ids:
            await runner.wait(job_id)
        statuses = [await runner.status(job_id) for job_id in ids]
    for found in statuses:
        assert found is not None
        job, targets = found
        assert job.status is JobState.PARTIAL
        assert targets[0].result is not None and "Page" in targets[0].result.content
        assert targets[1].error is not None and targets[1].error.startswith("RobotsDisallowed")
        assert "--obey-robots" in (targets[1].hint or "")
    assert not any(path.startswith("/private") for path in tls_server.requests)
    assert tls_server.count("/robots.txt") == 1  # one origin, fetched once for every job


async def test_no_robots_txt_allows_everything(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, obey_robots=True)
    async with fetcher:
        result = await fetcher(Target(tls_server.url("/page?n=1")))
    assert "Page 1" in result.content
    assert tls_server.count("/robots.txt") == 1


async def test_a_failing_robots_txt_stops_the_fetch_for_now_and_asks_for_a_retry(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    tls_server.robots = "500"
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, obey_robots=True)
    async with fetcher:
        with pytest.raises(FetchError, match=r"robots\.txt") as info:
            await fetcher(Target(tls_server.url("/page?n=1")))
        assert info.value.retryable
        tls_server.robots = ROBOTS
        # Not cached as a failure: the next attempt asks again and goes ahead.
        result = await fetcher(Target(tls_server.url("/page?n=2")))
    assert "Page 2" in result.content
    assert tls_server.count("/page?n=1") == 0
    assert tls_server.count("/robots.txt") == 2


async def test_robots_are_not_read_unless_asked(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    tls_server.robots = ROBOTS
    fetcher = HttpFetcher(verify=client_tls, trust_env=False)
    with pytest.raises(FetchError, match="404"):  # the server's own answer, not a refusal
        await fetcher(Target(tls_server.url("/private/1")))
    assert tls_server.count("/private/1") == 1
    assert tls_server.count("/robots.txt") == 0


async def test_a_disallowed_url_raises_robots_disallowed_outside_a_runner(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    tls_server.robots = ROBOTS
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, obey_robots=True)
    with pytest.raises(RobotsDisallowed, match="disallows"):
        await fetcher(Target(tls_server.url("/private/1")))
    assert tls_server.count("/private/1") == 0
