"""The delivery task sleeps while nothing it may claim is due: an event in flight (leased by
this runner) or due to a URL with its attempts in flight does not make it ask the store
again and again until that attempt ends."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from trio_batch import Config, Store, open_runner
from trio_batch.runner._deliveries import PER_DESTINATION

from ..support.fakes import FakeClock, ScriptedFetch, urls
from .test_delivery_fairness import SLOW, HeldReceivers

#: Long beside anything the test waits for: a claim it sees is a wake, never the poll.
#: Claims that show a loop (a wake makes one or two).
MANY = 50
CONFIG = Config(jobs_per_caller=16, jobs_total=32, poll_interval=3600.0)


async def _claims_while_quiet(runner: Any, receivers: HeldReceivers, holding: int) -> int:
    """Claims the delivery task makes once ``holding`` attempts to ``SLOW`` are in flight and
    every task has gone quiet (trio's clock is frozen: no timer fires meanwhile); at least
    :data:`MANY` if it never goes quiet."""
    claims = [0]
    many = trio.Event()
    real = runner._store.claim_delivery

    async def counted(**kw: Any) -> Any:
        claims[0] += 1
        if claims[0] >= MANY:
            many.set()
        return await real(**kw)

    await receivers.until(lambda: receivers.in_flight[SLOW] == holding)
    runner._store.claim_delivery = counted
    async with trio.open_nursery() as nursery:

        async def quiet() -> None:
            # Quiet: every task waits on something but the clock; a task asking the store
            # in a loop is never quiet for long. Twice, to count the claims between.
            await trio.testing.wait_all_tasks_blocked(cushion=0.2)
            claims[0] = 0
            await trio.testing.wait_all_tasks_blocked(cushion=0.2)
            nursery.cancel_scope.cancel()

        async def busy() -> None:
            await many.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(quiet)
        nursery.start_soon(busy)
    return claims[0]


async def test_an_event_in_flight_does_not_make_the_task_claim_in_a_loop(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, mock_clock: trio.testing.MockClock
) -> None:
    receivers = HeldReceivers()
    async with open_runner(store, fetch, CONFIG, now=clock, webhooks=receivers) as runner:
        await runner.submit("a", "user", urls("x"), webhook=SLOW)
        assert await _claims_while_quiet(runner, receivers, 1) == 0
        receivers.release.set()


async def test_events_to_a_busy_url_do_not_make_the_task_claim_in_a_loop(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, mock_clock: trio.testing.MockClock
) -> None:
    receivers = HeldReceivers()
    async with open_runner(store, fetch, CONFIG, now=clock, webhooks=receivers) as runner:
        for i in range(PER_DESTINATION + 2):
            await runner.submit("a", "user", urls(f"x{i}"), webhook=SLOW)
        assert await _claims_while_quiet(runner, receivers, PER_DESTINATION) == 0
        receivers.release.set()
