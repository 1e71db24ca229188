"""The service's server-side request forgery (SSRF) policy: which destinations a fetch may reach.

A service that fetches URLs sent by others must not let them reach the machine's own loopback
services, the private network behind it or a cloud metadata endpoint. :class:`DestinationPolicy`
is an async ``check_url`` hook: it resolves the URL's host with ``trio.socket.getaddrinfo`` and
refuses it if *any* address it resolves to is loopback, private, link-local, a metadata address
or otherwise not globally routable. A fetcher calls it before every request, redirect hops
included (``HttpFetcher(check_url=...)``).

Checking the name is not the whole story: a DNS answer can change between the check and the
connection (DNS rebinding). :class:`~trio_batch.fetchers.HttpFetcher` therefore pins: when its
``check_url`` is a policy, each new connection resolves the host through
:meth:`DestinationPolicy.addresses` and connects only to an address that check allowed (see
``_pool``), and every request, on a pooled connection too, is checked first.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from urllib.parse import urlsplit

import trio

from ._errors import DestinationRefused

__all__ = ["DestinationPolicy", "Resolver", "forbidden_reason"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Resolves a host name to its addresses (as strings); the default uses trio's getaddrinfo.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

#: Cloud metadata endpoints. Most are link-local or private anyway; listed so the refusal says so.
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.123",  # AWS time sync
        "100.100.100.200",  # Alibaba Cloud
        "fd00:ec2::254",  # AWS over IPv6
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def forbidden_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` must not be fetched from a service ("loopback", "private", ...), or None.

    IPv6 addresses that embed an IPv4 one (IPv4-mapped, NAT64, 6to4, Teredo) are judged by the
    address they embed as well.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        embedded: list[ipaddress.IPv4Address] = []
        if ip.ipv4_mapped is not None:
            embedded.append(ip.ipv4_mapped)
        if ip in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.sixtofour is not None:
            embedded.append(ip.sixtofour)
        if ip.teredo is not None:
            embedded.extend(ip.teredo)
        for inner in embedded:
            reason = forbidden_reason(inner)
            if reason is not None:
                return reason
        if ip.ipv4_mapped is not None or ip in _NAT64:
            return None  # judged by the IPv4 address it stands for
    if ip in _METADATA:
        return "a cloud metadata address"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_private:
        return "private"
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "not globally routable"
    return None


async def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, through ``trio.socket.getaddrinfo``."""
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class DestinationPolicy:
    """An async ``check_url`` hook refusing URLs whose host resolves to a non-public address.

    ``await policy(url)`` returns if the URL may be fetched and raises
    :class:`DestinationRefused` otherwise: for a URL without a host, a host that does not
    resolve, or a host any of whose addresses is loopback, private, link-local, a metadata
    address, multicast, reserved or otherwise not globally routable (see
    :func:`forbidden_reason`). With ``allow_private=True`` every destination is allowed (for a
    service that is meant to fetch from its own network). ``file://`` URLs are refused unless
    ``allow_file=True``, whatever ``allow_private`` says: they read the server's own disk.
    ``allow_networks`` lists networks allowed although they are not public (``"10.1.2.0/24"``,
    ``"127.0.0.1/32"``): a narrower opening than ``allow_private``; a malformed one raises
    ValueError. ``resolver`` replaces DNS (tests).
    """

    def __init__(
        self,
        *,
        allow_private: bool = False,
        allow_file: bool = False,
        allow_networks: Iterable[str] = (),
        resolver: Resolver | None = None,
    ) -> None:
        self.allow_private = allow_private
        self.allow_file = allow_file
        self.allow_networks = tuple(ipaddress.ip_network(n, strict=False) for n in allow_networks)
        self._resolve: Resolver = resolve if resolver is None else resolver

    def __repr__(self) -> str:
        return (
            f"DestinationPolicy(allow_private={self.allow_private!r}, "
            f"allow_file={self.allow_file!r})"
        )

    async def __call__(self, url: str) -> None:
        """Return if ``url`` may be fetched; raise :class:`DestinationRefused` if not."""
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # a bad IPv6 literal
            raise DestinationRefused(
                f"cannot tell where {url!r} leads: {exc}", hint="check the URL for typos"
            ) from None
        if parts.scheme.lower() == "file":
            if self.allow_file:
                return
            raise DestinationRefused(
                f"file URLs are not fetched by this service: {url}",
                hint="serve the file over http(s); the service's operator can allow file URLs "
                "(trio-batch serve --allow-file), which reads the server's own disk",
            )
        if self.allow_private:
            return
        try:
            host = parts.hostname
            port = parts.port
        except ValueError as exc:  # a port that is not a number, a bad IPv6 literal
            raise DestinationRefused(
                f"cannot tell where {url!r} leads: {exc}", hint="check the URL for typos"
            ) from None
        if not host:
            raise DestinationRefused(
                f"{url!r} names no host", hint="write the full URL, e.g. https://example.org/"
            )
        default_port = 443 if parts.scheme.lower() == "https" else 80
        await self._checked(host, port or default_port, url)

    async def addresses(self, host: str, port: int) -> list[str] | None:
        """The addresses of ``host`` that may be connected to, all of them checked.

        Raises :class:`DestinationRefused` as a call does. None with ``allow_private``: the
        host may be reached wherever it resolves to. A fetcher connects only to these
        addresses (DNS pinning), so an answer that changes after the check cannot slip by.
        """
        if self.allow_private:
            return None
        return await self._checked(host, port, f"{host}:{port}")

    async def _checked(self, host: str, port: int, url: str) -> list[str]:
        try:
            literal: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            addresses: Sequence[str] = [str(literal)]
        else:
            try:
                addresses = await self._resolve(host, port)
            except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
                raise DestinationRefused(
                    f"cannot resolve {host!r}: {exc}",
                    hint="check the host name; the service fetches only hosts it can resolve",
                ) from None
        if not addresses:
            raise DestinationRefused(f"{host!r} resolves to no address", hint="check the host")
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
            reason = None if self._opened(ip) else forbidden_reason(ip)
            if reason is not None:
                where = host if literal is not None else f"{host} ({ip})"
                raise DestinationRefused(
                    f"refused to fetch {url}: {where} is {reason}",
                    hint="this service fetches only public addresses; an operator can start "
                    "it with --allow-private to fetch from its own network",
                )
        return list(addresses)

    def _opened(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.allow_networks)
