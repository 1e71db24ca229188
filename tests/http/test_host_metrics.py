"""The service's /metrics reports the built-in fetcher's per-host figures."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path

import pytest

from trio_batch.cli._options import politeness
from trio_batch.cli._serve import add_serve_arguments
from trio_batch.fetchers import HttpFetcher, builtin_fetch

from ..support.fakes import FakeClock
from ..support.tls_server import TLSServer, client_tls, loopback_names, tls_ca, tls_server
from .test_http import auth, running

__all__ = ["client_tls", "tls_ca", "tls_server"]  # fixtures


async def test_metrics_show_requests_429s_and_pauses_per_host(
    tmp_path: Path, tls_server: TLSServer, client_tls: ssl.SSLContext, clock: FakeClock
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False, check_url=loopback_names())
    targets = [
        {"url": tls_server.url("/page?n=1", "a.test")},
        {"url": tls_server.url("/throttle?after=0&times=1")},
    ]
    async with running(tmp_path, fetcher, clock, host_metrics=True) as svc:
        r = await svc.client.post("/v1/batches", json={"targets": targets}, headers=auth())
        assert r.status_code == 201, r.text
        await svc.wait_done(r.json()["id"])
        text = (await svc.client.get("/metrics")).text
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    local, ip = '{host="localhost"}', '{host="a.test"}'
    assert samples["trio_batch_fetch_host_requests_total" + local] == 1
    assert samples["trio_batch_fetch_host_requests_total" + ip] == 1
    assert samples["trio_batch_fetch_host_throttled_total" + local] == 1
    assert samples["trio_batch_fetch_host_throttled_total" + ip] == 0
    # Retry-After: 0 still pauses the host for the first step of the backoff.
    assert samples["trio_batch_fetch_host_paused_seconds_total" + local] == 1
    assert samples["trio_batch_fetch_host_in_flight" + local] == 0
    assert samples["trio_batch_fetch_host_waiting" + local] == 0


async def test_metrics_name_no_host_unless_asked(
    tmp_path: Path, tls_server: TLSServer, client_tls: ssl.SSLContext, clock: FakeClock
) -> None:
    fetcher = HttpFetcher(verify=client_tls, trust_env=False)
    targets = [{"url": tls_server.url("/page?n=1", "127.0.0.1")}]
    async with running(tmp_path, fetcher, clock) as svc:
        r = await svc.client.post("/v1/batches", json={"targets": targets}, headers=auth())
        assert r.status_code == 201, r.text
        await svc.wait_done(r.json()["id"])
        text = (await svc.client.get("/metrics")).text
    assert "trio_batch_fetch_host_requests" in text  # described, with no sample
    assert "127.0.0.1" not in text and "host=" not in text
    assert serve_args().host_metrics is False and serve_args("--host-metrics").host_metrics


def serve_args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(["--db", "x.db", "--tokens", "t", *extra])


def test_serve_takes_the_per_host_options_to_the_builtin_fetcher() -> None:
    args = serve_args(
        "--per-host-concurrency", "2", "--per-host-rate", "0.5", "--http2", "--obey-robots"
    )
    fetch = builtin_fetch(**politeness(args))
    assert isinstance(fetch, HttpFetcher)
    assert (fetch.politeness.concurrency, fetch.politeness.rate) == (2, 0.5)
    assert (fetch.http2, fetch.obey_robots) == (True, True)
    default = builtin_fetch(**politeness(serve_args()))
    assert isinstance(default, HttpFetcher)
    assert (default.politeness.concurrency, default.politeness.rate) == (4, None)
    assert (default.http2, default.obey_robots) == (False, False)


@pytest.mark.parametrize(
    "bad",
    [
        ["--per-host-concurrency", "0"],
        ["--per-host-concurrency", "x"],
        ["--per-host-rate", "0"],
        ["--per-host-rate", "nan"],
        ["--per-host-rate", "-1"],
    ],
)
def test_bad_per_host_options_are_refused_before_anything_starts(
    bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        serve_args(*bad)
    assert info.value.code == 2
    assert bad[0] in capsys.readouterr().err
