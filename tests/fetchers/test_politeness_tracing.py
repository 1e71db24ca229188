"""A wait for a paused host is an event of the current span (the attempt's, with tracing on)."""

from __future__ import annotations

import trio.testing

from trio_batch import otel_tracing
from trio_batch.fetchers._hosts import Hosts, Politeness

from ..support.tracing import memory_provider


async def test_a_wait_for_a_paused_host_is_a_span_event(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider, exporter = memory_provider()
    otel_tracing(provider)  # the tracer code below the runner reports to
    hosts = Hosts(Politeness(first_pause=2.0, max_pause=30.0))
    async with hosts.slot("h.test") as ticket:
        hosts.throttled(ticket, 5.0)  # a 429 with Retry-After: 5
    with provider.get_tracer("test").start_as_current_span("attempt"):
        async with hosts.slot("h.test"):
            pass
        async with hosts.slot("h.test"):  # no pause left: no event
            pass
    [span] = exporter.get_finished_spans()
    assert [(e.name, dict(e.attributes or {})) for e in span.events] == [
        ("trio_batch.host_pause", {"server.address": "h.test", "pause_s": 5.0})
    ]
