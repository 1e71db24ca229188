"""The service's SSRF policy: which destinations a fetch may reach.

No test here sends a packet anywhere: literal addresses are judged without a lookup, names
resolve through an injected resolver or to loopback (``localhost``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import pytest

from trio_batch._ssrf import DestinationPolicy, DestinationRefused, forbidden_reason


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
