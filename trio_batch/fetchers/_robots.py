"""robots.txt, obeyed on request (``HttpFetcher(obey_robots=True)``, ``--obey-robots``).

Each origin's ``/robots.txt`` is fetched once per trio run's session and kept for an hour
(:class:`RobotsCache`, at most ``max_origins`` of them, the oldest dropped first), through the
same client, SSRF policy and per-host limits as every other request. Parsed with Protego
(Scrapy's parser: wildcards, ``Allow``/``Disallow`` precedence as RFC 9309 says).

As RFC 9309 says: a 4xx answer (no robots.txt) allows everything; a 5xx answer or a network
failure disallows everything for now, so the target fails with a retryable error and the next
attempt asks again. At most :data:`ROBOTS_MAX_BYTES` of a robots.txt are read (as Google
does, RFC 9309 asks for at least 500 KiB); the rest is ignored. Parsing runs in a thread, and
so does matching against a big file, so a huge robots.txt never holds the event loop.

The cache is keyed on the origin with its host spelled one way (:func:`host_key`), and a URL
is matched by the path that is actually sent: dot segments removed, unreserved characters
percent-decoded, so ``/./private`` or ``/x/%2e%2e/private`` is ``/private``.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import trio

from ._errors import FetchError, HTTPStatusError, RobotsDisallowed
from ._urls import host_key

if TYPE_CHECKING:
    from protego import Protego

__all__ = ["ROBOTS_MAX_BYTES", "RobotsCache", "sent_path"]

#: How long a fetched robots.txt is trusted, in seconds.
ROBOTS_TTL = 3600.0
#: The most of a robots.txt read and parsed, in bytes (Google's limit); the rest is ignored.
ROBOTS_MAX_BYTES = 500 * 1024
#: A robots.txt longer than this (characters) is matched in a thread, not on the event loop.
_MATCH_INLINE = 16 * 1024

#: Fetches a URL and returns at most ROBOTS_MAX_BYTES of its body as text; raises FetchError.
GetText = Callable[[str], Awaitable[str]]

_UNRESERVED = re.compile(r"%(2[DdEe]|5[Ff]|7[Ee]|[46][1-9A-Fa-f]|[57][0-9Aa]|3[0-9])")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def sent_path(url: str) -> str:
    """``url`` with its path as a server reads it: unreserved characters percent-decoded and
    dot segments removed (RFC 3986, 6.2.2 and 5.2.4), so rules match the resource asked for."""
    parts = urlsplit(url)
    path = _UNRESERVED.sub(lambda m: chr(int(m.group(1), 16)), parts.path)
    out: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if path.split("/")[-1] in (".", ".."):
        out.append("")  # "/a/.." is the directory "/", not "/a"
    return urlunsplit(parts._replace(path="/" + "/".join(out)))


def _origin_key(url: str) -> str:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port
    shown = "" if port is None or port == _DEFAULT_PORTS.get(scheme) else f":{port}"
    return f"{scheme}://{host_key(parts.hostname or '')}{shown}"


class _Rules:
    """One origin's parsed robots.txt (None: everything allowed)."""

    __slots__ = ("big", "expires", "parser")

    def __init__(self, parser: Protego | None, expires: float, *, big: bool = False) -> None:
        self.parser = parser
        self.expires = expires
        self.big = big  # matched in a thread


class RobotsCache:
    """Per-origin robots.txt rules for one session; ``check`` raises for a disallowed URL."""

    def __init__(self, user_agent: str, *, max_origins: int = 1024) -> None:
        self.user_agent = user_agent
        self.max_origins = max_origins
        self._rules: OrderedDict[str, _Rules] = OrderedDict()
        self._locks: dict[str, trio.Lock] = {}
        self.fetched = 0  # robots.txt fetches made, for tests and figures

    async def check(self, url: str, get_text: GetText) -> None:
        """Return if ``url`` may be fetched; raises :class:`RobotsDisallowed` if not.

        ``url`` is matched as it is sent (see :func:`sent_path`). The first request to an
        origin fetches its robots.txt (concurrent ones wait for that fetch rather than making
        their own; spellings of one host share it). Cancellation leaves nothing cached.
        """
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        rules = await self._rules_for(_origin_key(url), origin, get_text)
        parser = rules.parser
        if parser is None:
            return
        sent = sent_path(url)
        if rules.big:
            allowed = await trio.to_thread.run_sync(
                parser.can_fetch, sent, self.user_agent, abandon_on_cancel=True
            )
        else:
            allowed = parser.can_fetch(sent, self.user_agent)
        if not allowed:
            raise RobotsDisallowed(
                f"{origin}/robots.txt disallows {url} for {self.user_agent}",
                hint="the site asks robots not to fetch this URL; leave it out, or fetch "
                "without --obey-robots (obey_robots=False) if you have the site's permission",
            )

    async def _rules_for(self, key: str, origin: str, get_text: GetText) -> _Rules:
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            cached = self._rules.get(key)
            if cached is not None and cached.expires > trio.current_time():
                return cached
            try:
                rules = await self._fetch(origin, get_text)
            except BaseException:
                if key not in self._rules:
                    self._locks.pop(key, None)  # nothing cached: keep the locks bounded
                raise
            self._rules[key] = rules
            self._rules.move_to_end(key)
            while len(self._rules) > self.max_origins:
                old, _ = self._rules.popitem(last=False)
                self._locks.pop(old, None)
            return rules

    async def _fetch(self, origin: str, get_text: GetText) -> _Rules:
        from protego import Protego

        self.fetched += 1
        expires = trio.current_time() + ROBOTS_TTL
        try:
            text = await get_text(origin + "/robots.txt")
        except HTTPStatusError as exc:
            if exc.status_code < 500:
                return _Rules(None, expires)  # no robots.txt: everything allowed
            raise _unavailable(origin, str(exc)) from None
        except FetchError as exc:
            if isinstance(exc, RobotsDisallowed):
                raise
            raise _unavailable(origin, str(exc)) from None
        # Pure computation on a bounded text: nothing to clean up if we stop waiting.
        parser = await trio.to_thread.run_sync(Protego.parse, text, abandon_on_cancel=True)
        return _Rules(parser, expires, big=len(text) > _MATCH_INLINE)


def _unavailable(origin: str, why: str) -> FetchError:
    return FetchError(
        f"cannot read {origin}/robots.txt ({why}), so nothing there is fetched for now",
        hint="the site's robots.txt failed to load; the target is tried again as the retry "
        "policy allows, or fetch without --obey-robots",
        retryable=True,
    )
