"""The URL checks and refusals the built-in fetcher makes before any I/O."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import SplitResult, urlsplit

import httpx

from ._errors import ResponseTooLarge, URLError

__all__ = [
    "HOST_HINT",
    "check_http_url",
    "host_key",
    "host_problem",
    "response_too_large",
    "split_url",
    "unsupported_scheme",
]

#: How :func:`host_key` spells the local machine: ``localhost`` names (RFC 6761) and the
#: addresses they resolve to.
_LOOPBACK = "localhost"
_LOOPBACK_ADDRESSES = frozenset({"127.0.0.1", "::1"})


def host_key(host: str) -> str:
    """One spelling per host, for what is kept per host (limits, pauses, robots.txt).

    Case and a trailing dot are dropped; an IP address is written in its usual form (``127.1``,
    ``0x7f.0.0.1`` and ``2130706433`` are all ``127.0.0.1``, as the resolver reads them;
    ``::FFFF:127.0.0.1`` is its IPv4 address); ``localhost``, its subdomains, ``127.0.0.1``
    and ``::1`` are ``localhost``. One host under several spellings then shares one set of
    limits.
    """
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return _LOOPBACK
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        if not name or not all(c in "0123456789abcdefx." for c in name):
            return name
        try:  # the classic forms inet_aton reads (and getaddrinfo with it): 127.1, 0x7f.1
            ip = ipaddress.ip_address(socket.inet_aton(name))
        except OSError:
            return name
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    address = str(ip)
    return _LOOPBACK if address in _LOOPBACK_ADDRESSES else address


def split_url(url: str) -> SplitResult:
    """``urlsplit(url)``, with a malformed URL refused as :class:`URLError`."""
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise URLError(
            f"{url!r} is not a valid URL: {exc}",
            hint="check the URL for typos and unescaped characters",
        ) from None


def check_http_url(url: str) -> None:
    """Refuse an http(s) URL without a host, with a port out of range or a host name no
    resolver takes, before any I/O."""
    parts = split_url(url)
    try:
        parts.port  # noqa: B018 - raises ValueError when out of range
    except ValueError as exc:
        raise URLError(
            f"{url!r} is not a valid URL: {exc}", hint="ports go from 1 to 65535"
        ) from None
    if not parts.hostname:
        raise URLError(f"{url!r} has no host name", hint="write the URL as http://host/path")
    problem = host_problem(url)
    if problem is not None:
        raise URLError(f"{url!r} has a host name no resolver takes: {problem}", hint=HOST_HINT)


#: The hint of a host name :func:`host_problem` refuses.
HOST_HINT = (
    "check the host name: no empty label (..), none over 63 characters, no character a "
    "domain name may not hold"
)


def host_problem(url: str) -> str | None:
    """What is wrong with the host name of the http(s) ``url``, or None if a request can be
    sent to it: read as httpx reads it (an "xn--" label that is not IDNA raises as it is
    decoded), then as the resolver encodes it (every label 1 to 63 characters). Else a bare
    UnicodeError came out of the request, with no hint."""
    try:
        parsed = httpx.URL(url)
        parsed.host  # noqa: B018
        parsed.raw_host.decode("ascii").encode("idna")
    except (httpx.InvalidURL, UnicodeError) as exc:
        return str(exc)
    return None


def unsupported_scheme(url: str, scheme: str, *, allow_file: bool) -> URLError:
    """The error for a URL whose scheme this fetcher does not fetch, saying which it does."""
    allowed = "http://, https:// and file://" if allow_file else "http:// and https://"
    if not scheme:
        return URLError(
            f"{url!r} has no scheme",
            hint=f"write the full URL, e.g. https://{url.lstrip('/')}",
        )
    if scheme == "file":
        return URLError(
            f"file URLs are not allowed here: {url}",
            hint="this fetcher was built with allow_file=False (trio-batch serve refuses file "
            "URLs unless started with --allow-file); fetch the file over http",
        )
    return URLError(
        f"scheme {scheme!r} is not supported: {url}",
        hint=f"this fetcher handles {allowed} URLs; pass your own fetch function to the runner "
        "for other schemes",
    )


def response_too_large(url: str, size: str, max_bytes: int) -> ResponseTooLarge:
    """The error for a body of ``size`` (as said to a person) over the ``max_bytes`` limit."""
    return ResponseTooLarge(
        f"the body of {url} is {size}; the limit is {max_bytes} bytes",
        hint="fetch a smaller resource, or raise the fetcher's max_bytes",
    )
