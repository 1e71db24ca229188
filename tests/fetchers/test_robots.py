"""robots.txt, obeyed on request: fetched once per origin through the same client and limits,
a disallowed target failing with a hint. Against a real HTTPS server that counts."""

from __future__ import annotations

import ssl

import protego
import pytest
import trio
import trio.testing

from trio_batch import Config, JobState, Store, Target, open_runner
from trio_batch.fetchers import FetchError, HttpFetcher, RobotsDisallowed

from ..support.fakes import on_loop_thread
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


@pytest.mark.parametrize("status", ["401", "403", "404", "410", "418"])
async def test_no_robots_txt_allows_everything(
    tls_server: TLSServer, client_tls: ssl.SSLContext, status: str
) -> None:
    # RFC 9309, 2.3.1.3: any 4xx answer ("unavailable") allows everything.
    tls_server.robots = status
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


async def test_a_failing_robots_txt_blocks_for_any_5xx(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    tls_server.robots = "503"
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, obey_robots=True)
    with pytest.raises(FetchError, match=r"robots\.txt") as info:
        await fetcher(Target(tls_server.url("/page?n=1")))
    assert info.value.retryable
    assert tls_server.count("/page?n=1") == 0


async def test_robots_txt_is_read_again_after_its_hour(
    tls_server: TLSServer, client_tls: ssl.SSLContext, mock_clock: trio.testing.MockClock
) -> None:
    tls_server.robots = "User-agent: *\nDisallow: /nothing\n"
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, obey_robots=True)
    async with fetcher:
        await fetcher(Target(tls_server.url("/page?n=1")))
        tls_server.robots = "User-agent: *\nDisallow: /page\n"
        mock_clock.jump(3599)
        await fetcher(Target(tls_server.url("/page?n=2")))  # still the first hour's rules
        assert tls_server.count("/robots.txt") == 1
        mock_clock.jump(2)
        with pytest.raises(RobotsDisallowed):
            await fetcher(Target(tls_server.url("/page?n=3")))
    assert tls_server.count("/robots.txt") == 2
    assert tls_server.count("/page?n=3") == 0


async def test_a_redirect_to_a_disallowed_path_is_not_followed(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    tls_server.robots = ROBOTS
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, obey_robots=True)
    with pytest.raises(RobotsDisallowed, match="/private/1"):
        await fetcher(Target(tls_server.url("/redirect?to=/private/1")))
    assert tls_server.count("/redirect?to=/private/1") == 1
    assert tls_server.count("/private/1") == 0


@pytest.mark.parametrize(
    "path", ["/./private/1", "/x/../private/1", "/x/%2e%2E/private/1", "/%2e/private/1"]
)
async def test_dot_segments_do_not_get_round_a_disallow(
    tls_server: TLSServer, client_tls: ssl.SSLContext, path: str
) -> None:
    tls_server.robots = ROBOTS
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, obey_robots=True)
    with pytest.raises(RobotsDisallowed):
        await fetcher(Target(tls_server.url(path)))
    assert not any("private" in p for p in tls_server.requests)


async def test_spellings_of_one_host_share_its_robots_txt(
    tls_server: TLSServer, tls_ca: object, client_tls: ssl.SSLContext
) -> None:
    tls_server.robots = ROBOTS
    client_tls.check_hostname = False  # "127.1" is no name the certificate can carry
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, obey_robots=True)
    async with fetcher:
        for n, host in enumerate(["localhost", "127.0.0.1", "127.1", "LOCALHOST"]):
            await fetcher(Target(tls_server.url(f"/page?n={n}", host)))
            with pytest.raises(RobotsDisallowed):
                await fetcher(Target(tls_server.url("/private/1", host)))
    assert tls_server.count("/robots.txt") == 1


def _sized(size: int, last_rule: str) -> bytes:
    """A robots.txt of exactly ``size`` bytes: ROBOTS, comments, then ``last_rule``."""
    end = f"Disallow: {last_rule}\n".encode()
    filler = size - len(ROBOTS) - len(end)
    lines = b"#" * (filler % 64 - 1) + b"\n" if filler % 64 else b""
    body = ROBOTS.encode() + (b"#" * 63 + b"\n") * (filler // 64) + lines + end
    assert len(body) == size
    return body


async def test_a_huge_robots_txt_is_read_to_500_kib_and_parsed_off_the_event_loop(
    tls_server: TLSServer, client_tls: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed_on_loop: list[bool] = []
    matched_on_loop: list[bool] = []
    parse, can_fetch = protego.Protego.parse, protego.Protego.can_fetch

    def spy_parse(content: str) -> protego.Protego:
        parsed_on_loop.append(on_loop_thread())
        return parse(content)

    def spy_can_fetch(self: protego.Protego, url: str, user_agent: str) -> bool:
        matched_on_loop.append(on_loop_thread())
        return can_fetch(self, url, user_agent)

    monkeypatch.setattr(protego.Protego, "parse", spy_parse)
    monkeypatch.setattr(protego.Protego, "can_fetch", spy_can_fetch)
    # A last line ending exactly at 500 KiB is read; one ending a byte later is cut, and so
    # is every rule after it (here, in all 9 MB).
    kib500 = 500 * 1024
    for size, rule, refused in [(kib500, "/page", True), (kib500 + 1, "/page", False)]:
        tls_server.robots = _sized(size, rule) + b"Disallow: /\n" * 700_000
        fetcher = HttpFetcher(verify=client_tls, trust_env=False, obey_robots=True)
        with pytest.raises(RobotsDisallowed, match="/private"):
            await fetcher(Target(tls_server.url("/private/1")))
        if refused:
            with pytest.raises(RobotsDisallowed):
                await fetcher(Target(tls_server.url(f"/page?n={size}")))
        else:
            assert "Page" in (await fetcher(Target(tls_server.url(f"/page?n={size}")))).content
    assert parsed_on_loop == [False] * 4  # each fetcher call here has a session of its own
    assert matched_on_loop and not any(matched_on_loop)
