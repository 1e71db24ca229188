"""robots.txt, obeyed on request (``HttpFetcher(obey_robots=True)``, ``--obey-robots``).

Each origin's ``/robots.txt`` is fetched once per trio run's session and kept for an hour
(:class:`RobotsCache`, at most ``max_origins`` of them, the oldest dropped first), through the
same client, SSRF policy and per-host limits as every other request. Parsed with Protego
(Scrapy's parser: wildcards, ``Allow``/``Disallow`` precedence as RFC 9309 says).

As RFC 9309 says: a 4xx answer (no robots.txt) allows everything; a 5xx answer or a network
failure disallows everything for now, so the target fails with a retryable error and the next
attempt asks again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import trio

from ._errors import FetchError, HTTPStatusError, RobotsDisallowed

__all__ = ["RobotsCache"]

#: How long a fetched robots.txt is trusted, in seconds.
ROBOTS_TTL = 3600.0

#: Fetches a URL and returns its body as text; raises FetchError (or DestinationRefused).
GetText = Callable[[str], Awaitable[str]]


class _Rules:
    """One origin's parsed robots.txt (None: everything allowed)."""

    __slots__ = ("expires", "parser")

    def __init__(self, parser: object | None, expires: float) -> None:
        self.parser = parser
        self.expires = expires


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

        The first request to an origin fetches its robots.txt (concurrent ones wait for
        that fetch rather than making their own). Cancellation leaves nothing cached.
        """
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}".lower()
        rules = await self._rules_for(origin, get_text)
        if rules.parser is None:
            return
        from protego import Protego

        assert isinstance(rules.parser, Protego)
        if not rules.parser.can_fetch(url, self.user_agent):
            raise RobotsDisallowed(
                f"{origin}/robots.txt disallows {url} for {self.user_agent}",
                hint="the site asks robots not to fetch this URL; leave it out, or fetch "
                "without --obey-robots (obey_robots=False) if you have the site's permission",
            )

    async def _rules_for(self, origin: str, get_text: GetText) -> _Rules:
        lock = self._locks.setdefault(origin, trio.Lock())
        async with lock:
            cached = self._rules.get(origin)
            if cached is not None and cached.expires > trio.current_time():
                return cached
            try:
                rules = await self._fetch(origin, get_text)
            except BaseException:
                if origin not in self._rules:
                    self._locks.pop(origin, None)  # nothing cached: keep the locks bounded
                raise
            self._rules[origin] = rules
            self._rules.move_to_end(origin)
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
        return _Rules(Protego.parse(text), expires)


def _unavailable(origin: str, why: str) -> FetchError:
    return FetchError(
        f"cannot read {origin}/robots.txt ({why}), so nothing there is fetched for now",
        hint="the site's robots.txt failed to load; the target is tried again as the retry "
        "policy allows, or fetch without --obey-robots",
        retryable=True,
    )
