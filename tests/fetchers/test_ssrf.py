"""The service's SSRF policy: which destinations a fetch may reach.

No test here sends a packet anywhere: literal addresses are judged without a lookup, names
resolve through an injected resolver or to loopback (``localhost``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from trio_batch import Config, Target
from trio_batch.fetchers import DestinationPolicy, DestinationRefused, forbidden_reason
from trio_batch.http import builtin_fetch

from ..http.test_http import auth, running
from ..support.fakes import FakeClock


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.169.254", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "private"),  # 0.0.0.0/8, "this network"
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("100.64.0.1", "not globally routable"),  # carrier-grade NAT
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:a00:1::", "private"),  # 6to4 of 10.0.0.1
    ],
)
def test_non_public_addresses_are_refused_with_a_reason(address: str, reason: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address", ["93.184.215.14", "1.1.1.1", "2606:4700:4700::1111", "::ffff:1.1.1.1"]
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) is None


class FakeDNS:
    """A resolver answering from a table, recording what it was asked."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append((host, port))
        if host not in self.table:
            raise OSError(f"no such host {host}")
        return self.table[host]


DNS = {
    "public.test": ["93.184.215.14"],
    "internal.test": ["10.0.0.7"],
    "mixed.test": ["93.184.215.14", "127.0.0.1"],  # one bad address is enough to refuse
    "zoned.test": ["fe80::1%lo"],
}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:8000/x", "127.0.0.1 is loopback"),
        ("http://[::1]/", "::1 is loopback"),
        ("http://169.254.169.254/latest/meta-data/", "is a cloud metadata address"),
        ("https://internal.test/", "internal.test (10.0.0.7) is private"),
        ("https://mixed.test/", "mixed.test (127.0.0.1) is loopback"),
        ("https://zoned.test/", "zoned.test (fe80::1) is link-local"),
        ("https://nowhere.test/", "cannot resolve 'nowhere.test'"),
        ("http:///path-only", "names no host"),
        ("file:///etc/passwd", "file URLs are not fetched"),
        ("http://public.test:http/", "cannot tell where"),
    ],
)
async def test_the_policy_refuses_non_public_destinations(url: str, message: str) -> None:
    policy = DestinationPolicy(resolver=FakeDNS(DNS))
    with pytest.raises(DestinationRefused, match=message.replace("(", r"\(").replace(")", r"\)")):
        await policy(url)


async def test_the_policy_allows_public_destinations_and_resolves_with_the_port() -> None:
    dns = FakeDNS(DNS)
    policy = DestinationPolicy(resolver=dns)
    await policy("https://public.test/a")
    await policy("http://public.test:8080/b")
    await policy("http://93.184.215.14/c")  # a literal is judged without a lookup
    assert dns.asked == [("public.test", 443), ("public.test", 8080)]


async def test_allow_private_allows_everything() -> None:
    dns = FakeDNS(DNS)
    policy = DestinationPolicy(allow_private=True, resolver=dns)
    for url in ("http://127.0.0.1/", "https://internal.test/", "http://169.254.169.254/"):
        await policy(url)
    assert dns.asked == []


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost/",
        "http://2130706433/",  # 127.0.0.1 as one number
        "http://0x7f.1/",  # and in hex
        "http://127.1/",
    ],
)
async def test_real_resolution_catches_loopback_spellings(url: str) -> None:
    """Through trio's getaddrinfo: every spelling of loopback resolves locally and is refused."""
    with pytest.raises(DestinationRefused, match="loopback"):
        await DestinationPolicy()(url)


async def test_the_refusal_carries_a_hint() -> None:
    with pytest.raises(DestinationRefused) as info:
        await DestinationPolicy()("http://127.0.0.1/")
    assert "--allow-private" in info.value.hint


# --------------------------------------------------------------------------------------------
# Through the service, with the built-in fetcher (trio_batch.fetchers, from the cli extra)


async def test_the_service_refuses_private_destinations_on_every_hop(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The first URL resolves (by the fake DNS) to a public address and redirects to loopback.

    httpx's MockTransport stands in for the network: no packet leaves the test, and it records
    which requests were actually sent.
    """
    import httpx

    from trio_batch import fetchers

    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        if request.url.path == "/redirect":
            return httpx.Response(302, headers={"Location": "http://127.0.0.1:8000/secret"})
        if request.url.path == "/redirect-by-name":
            return httpx.Response(302, headers={"Location": "http://internal.test/admin"})
        return httpx.Response(200, text="public page", headers={"Content-Type": "text/plain"})

    fetch = fetchers.HttpFetcher(
        check_url=DestinationPolicy(resolver=FakeDNS(DNS)),
        allow_file=False,
        transport=httpx.MockTransport(handler),
    )
    names = [
        "http://public.test/redirect",
        "http://public.test/redirect-by-name",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]/",
        "file:///etc/passwd",
        "http://public.test/ok",
    ]
    async with running(tmp_path, fetch, clock, config=Config(targets_per_job=8)) as svc:
        r = await svc.client.post(
            "/v1/batches", json={"targets": [{"url": u} for u in names]}, headers=auth()
        )
        assert r.status_code == 201
        final = await svc.wait_done(r.json()["id"])
        job_id = r.json()["id"]
        targets = [
            (await svc.client.get(f"/v1/batches/{job_id}/targets/{i}", headers=auth())).json()
            for i in range(len(names))
        ]
    assert final["status"] == "partial"
    errors = [t["error"] for t in targets]
    assert errors[0] == (
        "DestinationRefused: refused to fetch http://127.0.0.1:8000/secret: 127.0.0.1 is loopback"
    )
    assert errors[1] == (
        "DestinationRefused: refused to fetch http://internal.test/admin: "
        "internal.test (10.0.0.7) is private"
    )
    assert errors[2].endswith("169.254.169.254 is a cloud metadata address")
    assert errors[3].endswith("is loopback")
    assert errors[4] is not None and "file" in errors[4]
    assert "--allow-private" in targets[0]["hint"]
    assert targets[5]["status"] == "done" and targets[5]["result"]["content"] == "public page"
    # Only public hops were ever requested.
    assert sent == [
        "http://public.test/redirect",
        "http://public.test/redirect-by-name",
        "http://public.test/ok",
    ]


def test_the_service_default_fetcher_is_guarded() -> None:
    fetch: Any = builtin_fetch()
    assert isinstance(fetch.check_url, DestinationPolicy)
    assert fetch.check_url.allow_private is False
    assert fetch.allow_file is False and fetch.trust_env is False
    fetch = builtin_fetch(allow_private=True)
    assert fetch.check_url.allow_private is True
    assert fetch.allow_file is False and fetch.check_url.allow_file is False


async def test_allow_private_does_not_open_file_urls(tmp_path: Path) -> None:
    """--allow-private once also let every caller read the server's disk, its token file
    included (issue 12, item 2): file access is its own choice."""
    tokens = tmp_path / "tokens"
    tokens.write_text("secret-token bob user\n")
    for fetch in (builtin_fetch(allow_private=True), builtin_fetch()):
        with pytest.raises(Exception) as info:
            await fetch(Target(tokens.as_uri()))
        assert "secret-token" not in str(info.value)
        assert "--allow-file" in getattr(info.value, "hint", "")
    with pytest.raises(DestinationRefused):
        await DestinationPolicy(allow_private=True)(tokens.as_uri())
    await DestinationPolicy(allow_file=True)(tokens.as_uri())  # allowed: returns
    allowed = await builtin_fetch(allow_file=True)(Target(tokens.as_uri()))
    assert allowed.content == "secret-token bob user\n"


def test_serve_takes_file_access_as_its_own_option() -> None:
    import argparse

    from trio_batch.cli._serve import add_serve_arguments

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(["--db", "x.db", "--tokens", "t", "--allow-private"])
    assert (args.allow_private, args.allow_file) == (True, False)
    assert args.target_timeout > 0  # serve bounds every target by default
    args = parser.parse_args(["--db", "x.db", "--tokens", "t", "--allow-file"])
    assert (args.allow_private, args.allow_file) == (False, True)
