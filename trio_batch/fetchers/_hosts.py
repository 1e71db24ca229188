"""Politeness per host, shared by every job of a runner: in-flight cap, rate, host-wide pause.

:class:`Hosts` holds one :class:`_Host` per host, named as :func:`~._urls.host_key` spells it
(``127.1``, ``LocalHost.`` and ``127.0.0.1`` are one host). Every request (each redirect hop)
takes a slot of its host with :meth:`Hosts.slot`: it waits while the host is paused, for one of
the host's ``concurrency`` places, and for the host's rate, in that order of arrival. A 429 (or a
503 carrying ``Retry-After``) pauses the host for every job (:meth:`Hosts.throttled`).

The pause: the server's ``Retry-After`` if longer than the host's backoff, never more than
``max_pause``. The backoff starts at ``first_pause`` and doubles with each 429 in a row, so
``Retry-After: 0`` still pauses; 429s answering requests that were already in flight when the
host was paused belong to the same burst and do not double it again. A success resets it.
Each host's state is its own: a paused or slow host never holds a request to another one.

Across runners (``shared``, a :class:`~trio_batch.store.HostLimits`: a PostgreSQL store): once
a request has its local place, it also takes a leased slot of the host in the store, waiting
(polling with a bounded backoff) while the store says the host is full, paused or ahead of its
rate; a 429's pause is written there for every runner. The slot is given back when the request
ends, even on cancellation (shielded, bounded by the store's deadline); a killed runner's slots
expire with their lease. If the store cannot be reached within its deadline the request fails
with a retryable :class:`~trio_batch.fetchers.FetchError` (the limits are never silently local).
"""

from __future__ import annotations

import math
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

import trio

from .._errors import StoreError
from .._text import MAX_SECONDS, is_finite, safe_text
from .._tracing import note
from ..store import HostLimits
from ._answers import parse_retry_after
from ._errors import FetchError

__all__ = ["HostFigures", "Hosts", "Politeness", "Ticket"]


def _is_number(value: object) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and is_finite(value)


@dataclass(frozen=True, slots=True)
class Politeness:
    """Per-host limits: ``concurrency`` requests in flight, ``rate`` request starts a second
    (None: no rate limit), and the pause after a 429: ``first_pause`` doubling up to
    ``max_pause`` seconds, or the server's ``Retry-After`` within ``max_pause``."""

    concurrency: int = 4
    rate: float | None = None
    first_pause: float = 1.0
    max_pause: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
            raise ValueError(
                f"per-host concurrency must be a whole number, not {self.concurrency!r}"
            )
        if not 1 <= self.concurrency <= 1000:
            shown = safe_text(self.concurrency, 40)
            raise ValueError(f"per-host concurrency must be from 1 to 1000, not {shown}")
        # True passed both as 1 (a bool is an int), and a str raised math's TypeError.
        if self.rate is not None and not (_is_number(self.rate) and self.rate > 0):
            raise ValueError(
                f"per-host rate must be a positive number, not {safe_text(self.rate, 40)}"
            )
        if not (
            _is_number(self.first_pause)
            and _is_number(self.max_pause)
            and 0 < self.first_pause <= self.max_pause <= MAX_SECONDS
        ):
            raise ValueError(
                f"first_pause must be positive and no more than a finite max_pause, at most "
                f"{MAX_SECONDS:g} s"
            )


@dataclass(frozen=True, slots=True)
class HostFigures:
    """One host's figures since it was first seen (or since it was dropped as idle):
    requests sent, 429s (and 503s with Retry-After) received, seconds of pause they set, and
    requests in flight and waiting for their turn now."""

    host: str
    requests: int
    throttled: int
    paused_seconds: float
    in_flight: int
    waiting: int


class _Host:
    __slots__ = (
        "epoch",
        "in_flight",
        "next_start",
        "pause_until",
        "paused_seconds",
        "requests",
        "slots",
        "strikes",
        "throttled",
        "turn",
        "waiting",
    )

    def __init__(self, concurrency: int) -> None:
        self.slots = trio.Semaphore(concurrency)
        self.waiting = 0
        self.in_flight = 0
        self.requests = 0
        self.throttled = 0
        self.paused_seconds = 0.0
        self.pause_until = -math.inf
        self.next_start = -math.inf
        self.turn = trio.Lock()  # held while waiting for the rate's next start (FIFO)
        self.strikes = 0  # 429 bursts in a row, for the backoff
        self.epoch = 0  # bumped at each new burst; a request remembers the one it started in

    def idle(self, now: float) -> bool:
        return self.waiting == 0 and self.in_flight == 0 and self.pause_until <= now


@dataclass(frozen=True, slots=True)
class Ticket:
    """A request's place at its host: what :meth:`Hosts.throttled` and ``succeeded`` take."""

    host: _Host
    epoch: int
    name: str = ""


class Hosts:
    """The per-host state of one trio run's fetches (see the module's docstring).

    At most ``max_hosts`` hosts are remembered; past it the least recently used idle host is
    forgotten (its figures with it), so a service fetching from millions of hosts stays bounded.
    """

    #: The first and the longest wait between two asks for a full host's shared slot.
    FIRST_POLL = 0.02
    MAX_POLL = 1.0

    def __init__(
        self,
        politeness: Politeness,
        *,
        max_hosts: int = 1024,
        shared: HostLimits | None = None,
        lease: float = 60.0,
    ) -> None:
        self.politeness = politeness
        self.max_hosts = max_hosts
        #: The per-host limits shared with other runners (None: this runner's only).
        self.shared = shared
        #: How long a shared slot is held at most: longer than any one request.
        self.lease = lease
        self._hosts: OrderedDict[str, _Host] = OrderedDict()

    def _host(self, name: str) -> _Host:
        host = self._hosts.get(name)
        if host is not None:
            self._hosts.move_to_end(name)
            return host
        if len(self._hosts) >= self.max_hosts:
            now = trio.current_time()
            for old, state in self._hosts.items():
                if state.idle(now):
                    del self._hosts[old]
                    break
        host = self._hosts[name] = _Host(self.politeness.concurrency)
        return host

    @asynccontextmanager
    async def slot(self, name: str) -> AsyncIterator[Ticket]:
        """Hold one of ``name``'s places for a request: waits for a place, a pause, the rate.

        Each wait for a pause is an event of the current span (the attempt's, with tracing on).

        Cancellation while waiting leaves no trace; the place is given back when the block
        ends, however it ends.
        """
        host = self._host(name)
        host.waiting += 1
        try:
            async with host.slots:
                # A pause may be extended while it runs (another job's 429): look again.
                while (wait := host.pause_until - trio.current_time()) > 0:
                    note("trio_batch.host_pause", {"server.address": name, "pause_s": wait})
                    await trio.sleep(wait)
                rate = self.politeness.rate
                if rate is not None:
                    # One waiter at a time (in order of arrival) holds the next turn, and
                    # takes it only once it starts: a wait cancelled keeps no turn.
                    async with host.turn:
                        start = max(trio.current_time(), host.next_start)
                        await trio.sleep_until(start)
                        host.next_start = start + 1 / rate
                async with self._shared_slot(name):
                    host.waiting -= 1
                    host.in_flight += 1
                    host.requests += 1
                    try:
                        yield Ticket(host, host.epoch, name)
                    finally:
                        host.in_flight -= 1
                        host.waiting += 1
        finally:
            host.waiting -= 1

    @asynccontextmanager
    async def _shared_slot(self, name: str) -> AsyncIterator[None]:
        """Hold one of ``name``'s slots in the shared store, if there is one (see the module).

        Cancellation while waiting, or a failure after asking, gives back (shielded) a slot
        the last ask may have taken.
        """
        shared = self.shared
        if shared is None:
            yield
            return
        slot = secrets.token_urlsafe(12)
        try:
            await self._take(shared, name, slot)
            yield
        finally:
            # Shielded: each store call is bounded by its deadline. Unreachable: the slot
            # expires with its lease.
            with trio.CancelScope(shield=True), suppress(StoreError):
                await shared.release_host_slot(slot)

    async def _take(self, shared: HostLimits, name: str, slot: str) -> None:
        p = self.politeness
        poll = self.FIRST_POLL
        while True:
            try:
                wait = await shared.acquire_host_slot(
                    name, slot, cap=p.concurrency, rate=p.rate, lease=self.lease
                )
            except StoreError as exc:
                raise FetchError(
                    f"the per-host limits for {name} could not be read from the store: {exc}",
                    hint="the database shared by the runners is unreachable; the target is "
                    "retried as the retry policy says",
                    retryable=True,
                ) from exc
            if wait is None:
                return
            if wait > 0:  # paused, or the rate's next start is ahead
                note("trio_batch.host_pause", {"server.address": name, "pause_s": wait})
                await trio.sleep(min(wait, p.max_pause))
                poll = self.FIRST_POLL
            else:  # full: other runners hold every slot
                await trio.sleep(poll)
                poll = min(poll * 2, self.MAX_POLL)

    def answered(self, ticket: Ticket, status: int, retry_after: str | None) -> float | None:
        """Note how the host answered: a 429, or a 503 with ``Retry-After``, pauses it;
        returns the pause set (None: no pause)."""
        delay = parse_retry_after(retry_after, now=time.time())
        if status == 429 or (status == 503 and delay is not None):
            return self.throttled(ticket, delay)
        self.succeeded(ticket)
        return None

    async def report(self, ticket: Ticket, status: int, retry_after: str | None) -> None:
        """:meth:`answered`, and a pause it sets written to the shared store for every runner.

        A store that cannot be reached leaves the pause local (the other runners meet the
        host's 429 themselves). Cancellation: the write is shielded (bounded by its deadline).
        """
        pause = self.answered(ticket, status, retry_after)
        if pause is None or self.shared is None:
            return
        with trio.CancelScope(shield=True), suppress(StoreError):
            await self.shared.pause_host(ticket.name, pause)

    def throttled(self, ticket: Ticket, retry_after: float | None) -> float:
        """The host answered 429 (or 503 with Retry-After): pause it; returns the pause set."""
        host = ticket.host
        host.throttled += 1
        if ticket.epoch == host.epoch:  # the first 429 of a new burst
            host.strikes += 1
            host.epoch += 1
        p = self.politeness
        backoff: float = min(p.first_pause * 2.0 ** min(host.strikes - 1, 64), p.max_pause)
        pause = min(max(retry_after or 0.0, backoff), p.max_pause)
        now = trio.current_time()
        until = now + pause
        if until > host.pause_until:
            host.paused_seconds += until - max(host.pause_until, now)
            host.pause_until = until
        return pause

    def succeeded(self, ticket: Ticket) -> None:
        """The host answered without throttling: a request of the current burst resets it."""
        if ticket.epoch == ticket.host.epoch:
            ticket.host.strikes = 0

    def figures(self) -> list[HostFigures]:
        """Every remembered host's figures, by host name."""
        return [
            HostFigures(name, h.requests, h.throttled, h.paused_seconds, h.in_flight, h.waiting)
            for name, h in sorted(self._hosts.items())
        ]
