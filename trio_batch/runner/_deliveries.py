"""Delivering jobs' terminal events from the outbox: at least once, retried with backoff.

The store writes a job's :class:`~trio_batch.JobEvent` into its outbox in the same transaction
as the terminal status; :class:`Deliveries`, a task in the runner's nursery, leases each due
event (:meth:`JobStore.claim_delivery`), hands it to ``Config.on_terminal`` and, for a job with
a webhook, to the :class:`WebhookDeliverer` the front end wired in (the runner knows no HTTP),
then records the answer. A failed attempt is due again after the next delay of
:data:`RETRY_DELAYS` (on the injected wall clock), with the same event id, until
:data:`GIVE_UP_AFTER` has passed since the round began. A runner that dies mid-delivery leaves
its lease to lapse (or, on PostgreSQL, to be taken over once it is reaped): the event goes out
again, so a receiver may see an event twice and deduplicates on its id.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from .._errors import StoreUnavailable
from .._event import MAX_ANSWER_LENGTH, JobEvent
from .._outage_log import OutageLog
from .._text import safe_text
from .._tracing import NO_TRACING, Tracing
from ..store import JobStore
from ._store_retry import retry_refused

__all__ = [
    "ATTEMPT_TIMEOUT",
    "GIVE_UP_AFTER",
    "LEASE",
    "RETRY_DELAYS",
    "Deliveries",
    "DeliveryAnswer",
    "OnTerminal",
    "WebhookDeliverer",
]

#: Seconds to wait after each failed attempt of a round, in order (about 23.6 h in all).
RETRY_DELAYS = (5.0, 60.0, 300.0, 1800.0, 7200.0, 18000.0, 28800.0, 28800.0)
#: A round of attempts ends this long (seconds) after it began: one day.
GIVE_UP_AFTER = 86400.0
#: How long (wall seconds) a claimed delivery is this runner's before another may take it.
LEASE = 120.0
#: The most one attempt (callback and webhook together) may take, in seconds.
ATTEMPT_TIMEOUT = 60.0
#: Deliveries in flight at once per runner.
CONCURRENCY = 16
#: Deliveries in flight at once to one destination (a URL's scheme and authority: a receiver
#: that gives each job its own URL is one): a slow receiver holds up only its own events,
#: never every slot (its next events wait in the outbox, others are claimed past).
PER_DESTINATION = 2

OnTerminal = Callable[[JobEvent], Awaitable[None]]


class DeliveryAnswer(Exception):
    """A failed delivery, with the answer to record (``"HTTP 503"``, ``"refused: ..."``).

    Raised by a :class:`WebhookDeliverer`; the event is tried again later."""


class WebhookDeliverer(Protocol):
    """Sends a job's event to its webhook URL; the HTTP service wires one in
    (:class:`trio_batch.fetchers.WebhookSender`)."""

    def check_url(self, url: object) -> str:
        """The webhook URL a submit gave, checked; raises :class:`~trio_batch.InvalidRequest`
        for one that can never be delivered to (at submit, before the job exists)."""
        ...

    async def deliver(self, event: JobEvent) -> str:
        """Send ``event`` once; return the receiver's answer (``"HTTP 200"``) if it took it,
        raise :class:`DeliveryAnswer` (or any ``Exception``) if not. Bounded in time."""
        ...


def destination(url: str) -> str:
    """``url`` up to the end of its authority (``https://host:port``), as written: the
    receiver :data:`PER_DESTINATION` bounds. The store passes over a URL that is such a
    prefix or begins with one followed by ``/``, ``?`` or ``#``."""
    start = url.find("://")
    if start < 0:
        return url
    start += 3
    end = len(url)
    for mark in "/?#":
        at = url.find(mark, start)
        if at >= 0:
            end = min(end, at)
    return url[:end]


def next_attempt_at(event: JobEvent, now: float) -> float | None:
    """When to try ``event`` again after its attempt number ``event.attempts + 1`` failed at
    ``now``; None once the round is over (every delay used, or a day gone)."""
    if event.attempts >= len(RETRY_DELAYS):
        return None
    at = now + RETRY_DELAYS[event.attempts]
    return None if at > event.round_from + GIVE_UP_AFTER else at


class Deliveries:
    """The runner's delivery task (:meth:`run`) and what wakes it (:meth:`wake`)."""

    def __init__(
        self,
        store: JobStore,
        *,
        now: Callable[[], float],
        webhooks: WebhookDeliverer | None,
        on_terminal: OnTerminal | None,
        poll_interval: float,
        logger: logging.Logger,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self._store = store
        self._tracing = tracing
        self._now = now
        self._webhooks = webhooks
        self._on_terminal = on_terminal
        self._poll_interval = poll_interval
        self._log = logger
        self._woken = trio.Event()
        self._claims = OutageLog(logger, "claim a webhook delivery")
        #: Attempts in flight by destination (:func:`destination`).
        self._in_flight: collections.Counter[str] = collections.Counter()
        #: Whether the last claim passed over URLs with enough attempts in flight.
        self._passed_over = False
        #: Attempts finished (recorded or not) since the start, for tests and metrics.
        self.attempts = 0
        self.attempted = trio.Event()

    @property
    def enabled(self) -> bool:
        """Whether this runner delivers anything (a webhook sender or ``on_terminal``)."""
        return self._webhooks is not None or self._on_terminal is not None

    def wake(self) -> None:
        """Look for due events now (a job just ended, or a redelivery was asked for)."""
        self._woken.set()

    async def run(self) -> None:
        """Until cancelled: claim each due event and deliver it, :data:`CONCURRENCY` at once
        and :data:`PER_DESTINATION` at once to one destination (an event to one that has
        that many in flight is passed over until one ends).

        Cancellation: stops at once; an attempt cut off is not recorded, its lease lapses and
        the event goes out again (at least once).
        """
        slots = trio.Semaphore(CONCURRENCY)
        async with trio.open_nursery() as nursery:
            while True:
                await slots.acquire()
                woken = self._woken = trio.Event()  # before the claim: no wake is missed
                event = await self._claim()
                if event is None:
                    slots.release()
                    await self._idle(woken)
                    continue
                if event.url is not None:
                    self._in_flight[destination(event.url)] += 1
                nursery.start_soon(self._deliver, event, slots)

    async def _claim(self) -> JobEvent | None:
        busy = {url for url, n in self._in_flight.items() if n >= PER_DESTINATION}
        self._passed_over = bool(busy)
        try:
            event = await self._store.claim_delivery(now=self._now(), lease=LEASE, skip_urls=busy)
        except StoreUnavailable as exc:
            self._claims.refused(exc)
            return None
        self._claims.answered()
        return event

    async def _idle(self, woken: trio.Event) -> None:
        """Wait for a wake, the next due event, or the poll (other runners' events)."""
        wait = self._poll_interval
        try:
            due = await self._store.next_delivery_due()
        except StoreUnavailable:
            due = None
        if due is not None:
            # Due already yet not claimed: to a URL passed over, whose attempt's end wakes
            # this task. Waiting 0 then asked the store again and again until it ended.
            left = due - self._now()
            if left > 0 or not self._passed_over:
                wait = min(wait, max(left, 0.0))
        with trio.move_on_after(wait):
            await woken.wait()

    async def _deliver(self, event: JobEvent, slots: trio.Semaphore) -> None:
        try:
            answer, delivered = await self._attempt(event)
            now = self._now()
            next_at = None if delivered else next_attempt_at(event, now)
            extra = {"job_id": event.job_id, "event_id": event.id, "answer": answer}
            if delivered:
                self._log.info("job event delivered", extra=extra)
            else:
                self._log.warning("job event not delivered", extra={**extra, "next_at": next_at})
            try:
                await retry_refused(
                    lambda: self._store.record_delivery(
                        event, answer=answer, delivered=delivered, now=now, next_at=next_at
                    ),
                    what="record a webhook delivery",
                    give_up_at=trio.current_time() + ATTEMPT_TIMEOUT,
                    log=self._log,
                    extra=extra,
                )
            except StoreUnavailable:
                # Its lease lapses and the event goes out again: at least once.
                self._log.error("could not record a webhook delivery", exc_info=True, extra=extra)
        finally:
            if event.url is not None:
                where = destination(event.url)
                self._in_flight[where] -= 1
                if not self._in_flight[where]:
                    del self._in_flight[where]
                self._woken.set()  # its URL's next event may be claimed now
            self.attempts += 1
            self.attempted.set()
            self.attempted = trio.Event()
            slots.release()

    async def _attempt(self, event: JobEvent) -> tuple[str, bool]:
        """One attempt: ``(answer, delivered)``. Never raises but ``Cancelled`` (and other
        ``BaseException``): a failing callback or receiver is an answer, not a crash."""
        try:
            answer = "ok"
            with (
                self._tracing.delivery(event.trace_context) as traceparent,
                trio.fail_after(ATTEMPT_TIMEOUT),
            ):
                # The request carries the delivery's span (the job's trace, from the store).
                event = dataclasses.replace(event, trace_context=traceparent)
                if event.callback and self._on_terminal is not None:
                    await self._on_terminal(event)
                    answer = "callback ok"
                if event.url is not None:
                    if self._webhooks is None:
                        raise DeliveryAnswer("this runner has no webhook sender")
                    answer = await self._webhooks.deliver(event)
            return _bounded(answer), True
        except trio.TooSlowError:
            return f"no answer within {ATTEMPT_TIMEOUT:g} s", False
        except DeliveryAnswer as exc:
            return _bounded(str(exc)), False
        except Exception as exc:
            self._log.warning("a job event's delivery raised", exc_info=True)
            return _bounded(f"{type(exc).__name__}: {exc}"), False


def _bounded(text: str) -> str:
    return safe_text(text)[:MAX_ANSWER_LENGTH]
