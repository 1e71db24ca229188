"""The fetcher's connections: one keep-alive pool per runner, closed with it, pinned by the
SSRF policy, never handed back with half a body. Against a real HTTPS server that counts."""

from __future__ import annotations

import ssl
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from trio_batch import Config, JobState, Store, Target, open_runner
from trio_batch.fetchers import DestinationPolicy, DestinationRefused, HttpFetcher

from ..support.tls_server import TLSServer, client_tls, tls_ca, tls_server, until
from .test_ssrf import FakeDNS

__all__ = ["client_tls", "tls_ca", "tls_server"]  # fixtures


def pages(srv: TLSServer, job: int, n: int, host: str = "localhost") -> list[Target]:
    return [Target(srv.url(f"/page?n={job}-{i}", host)) for i in range(n)]


async def run_jobs(store: Store, fetcher: HttpFetcher, jobs: list[list[Target]]) -> list[JobState]:
    async with open_runner(store, fetcher, Config()) as runner:
        ids = [(await runner.submit(f"c{i}", "user", job))[0] for i, job in enumerate(jobs)]
        done = [await runner.wait(job_id) for job_id in ids]
    return [job.status for job in done if job is not None]


async def test_a_runners_jobs_share_keep_alive_connections(
    store: Store, tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, per_host_concurrency=4)
    states = await run_jobs(store, fetcher, [pages(tls_server, j, 8) for j in range(4)])
    assert states == [JobState.DONE] * 4
    assert sum(tls_server.requests.values()) == 32
    # One connection per request in flight at most: four, not one per page.
    assert 1 <= tls_server.connections <= 4


async def test_the_runner_closes_the_connections_when_it_closes(
    store: Store, tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False)
    async with open_runner(store, fetcher, Config()) as runner:
        job_id, _ = await runner.submit("c", "user", pages(tls_server, 0, 3))
        await runner.wait(job_id)
        assert tls_server.open_connections == 1  # kept alive while the runner lives
    await until(lambda: tls_server.open_connections == 0)
    assert fetcher.host_figures() == []


async def test_a_call_outside_any_runner_closes_its_own_connection(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False)
    result = await fetcher(Target(tls_server.url("/page?n=1")))
    assert "Page 1" in result.content
    await until(lambda: tls_server.open_connections == 0)


async def test_nested_blocks_keep_the_pool_until_the_last_one_leaves(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False)
    async with fetcher:
        async with fetcher:
            await fetcher(Target(tls_server.url("/page?n=1")))
        await fetcher(Target(tls_server.url("/page?n=2")))
        assert tls_server.connections == 1
    await until(lambda: tls_server.open_connections == 0)


async def test_a_fetch_cancelled_mid_body_leaves_nothing_half_read_in_the_pool(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False)
    async with fetcher:
        await fetcher(Target(tls_server.url("/page?n=1")))
        with trio.move_on_after(30) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fetcher, Target(tls_server.url("/stall")))
                await until(lambda: tls_server.count("/stall") == 1)
                nursery.cancel_scope.cancel()  # the body is half sent
        assert not scope.cancelled_caught
        # The next page on that host reads its own answer, not the stalled body's rest,
        # over a new connection: the half-read one was closed, not pooled.
        result = await fetcher(Target(tls_server.url("/page?n=2")))
        assert "Page 2" in result.content
        assert tls_server.connections == 2
    tls_server.release.set()


def pinned(table: dict[str, list[str]], client_tls: ssl.SSLContext) -> tuple[HttpFetcher, FakeDNS]:
    dns = FakeDNS(table)
    policy = DestinationPolicy(allow_networks=["127.0.0.1/32"], resolver=dns)
    return HttpFetcher(check_url=policy, verify=client_tls, trust_env=False), dns


async def test_the_policy_pins_each_connection_to_the_address_it_checked(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    # site.test exists only in the fake DNS: the connection can only have gone to the
    # address the policy resolved and allowed.
    fetcher, dns = pinned({"site.test": ["127.0.0.1"]}, client_tls)
    async with fetcher:
        result = await fetcher(Target(tls_server.url("/page?n=7", "site.test")))
    assert "Page 7" in result.content
    assert [host for host, _ in dns.asked] == ["site.test", "site.test"]  # request, connect


async def test_a_name_rebound_between_check_and_connect_is_refused(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    class Rebinding(FakeDNS):
        async def __call__(self, host: str, port: int) -> list[str]:
            await super().__call__(host, port)
            return ["127.0.0.1"] if len(self.asked) == 1 else ["10.0.0.7"]

    dns = Rebinding({"site.test": []})
    policy = DestinationPolicy(allow_networks=["127.0.0.1/32"], resolver=dns)
    fetcher = HttpFetcher(check_url=policy, verify=client_tls, trust_env=False)
    with pytest.raises(DestinationRefused, match="private"):
        await fetcher(Target(tls_server.url("/page?n=1", "site.test")))
    assert tls_server.connections == 0


async def test_a_pooled_connection_is_not_used_once_the_policy_refuses_its_host(
    tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    table = {"site.test": ["127.0.0.1"]}
    fetcher, _ = pinned(table, client_tls)
    async with fetcher:
        await fetcher(Target(tls_server.url("/page?n=1", "site.test")))
        assert tls_server.open_connections == 1  # pooled, idle
        table["site.test"] = ["10.0.0.7"]
        with pytest.raises(DestinationRefused, match="private"):
            await fetcher(Target(tls_server.url("/page?n=2", "site.test")))
    assert tls_server.count("/page?n=2") == 0


async def test_http2_carries_every_job_over_one_connection_where_the_server_takes_it(
    store: Store, tls_ca: trustme.CA, client_tls: ssl.SSLContext, tmp_path: Path
) -> None:
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.trio import serve

    seen: list[str] = []
    clients: set[tuple[str, int]] = set()  # one client port per connection

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        seen.append(scope["http_version"])
        clients.add(tuple(scope["client"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send(
            {"type": "http.response.body", "body": b"over " + scope["http_version"].encode()}
        )

    pem = tmp_path / "server.pem"
    tls_ca.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(pem))
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.certfile = config.keyfile = str(pem)
    config.accesslog = None
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config, shutdown_trigger=stop.wait))
        port = int(binds[0].rsplit(":", 1)[1])
        fetcher = HttpFetcher(verify=client_tls, trust_env=False, http2=True)
        jobs = [[Target(f"https://localhost:{port}/{j}/{i}") for i in range(4)] for j in range(3)]
        states = await run_jobs(store, fetcher, jobs)
        stop.set()
    assert states == [JobState.DONE] * 3
    assert seen == ["2"] * 12
    assert len(clients) == 1
