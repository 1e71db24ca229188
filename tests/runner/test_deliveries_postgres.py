"""Runners sharing a PostgreSQL outbox: one delivers each event at a time, and the events a
runner was delivering when it went away are delivered by another."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

from trio_batch import Config, JobEvent, open_runner, open_store
from trio_batch.runner._deliveries import CONCURRENCY, LEASE

from ..support.deliveries import delivery_reaches
from ..support.fakes import FakeClock, ScriptedFetch, urls


class Held:
    """An ``on_terminal`` callback that records who was called and holds until released."""

    def __init__(self, calls: list[tuple[str, str]], name: str, release: trio.Event) -> None:
        self.calls, self.name, self.release = calls, name, release
        self.called = trio.Event()

    async def __call__(self, event: JobEvent) -> None:
        self.calls.append((self.name, event.id))
        self.called.set()
        self.called = trio.Event()
        await self.release.wait()


def counting(claim: Callable[..., Awaitable[Any]], counter: list[int]) -> Callable[..., Any]:
    async def counted(**kw: Any) -> Any:
        counter[0] += 1
        return await claim(**kw)

    return counted


def gate(store: Any) -> trio.Event:
    """Hold the store's claims until the event returned is set (counting them)."""
    may_claim = trio.Event()
    claim = getattr(store, "_ungated_claim", None) or store.claim_delivery
    store._ungated_claim = claim
    store.claims = 0

    async def gated(**kw: Any) -> Any:
        await may_claim.wait()
        store.claims += 1
        return await claim(**kw)

    store.claim_delivery = gated
    return may_claim


async def until_claimed(store: Any, n: int) -> None:
    while store.claims < n:  # noqa: ASYNC110 - the claims are another task's polls
        await trio.sleep(0.02)


async def until_stopped(runner: Any) -> None:
    while not runner._stopped:  # noqa: ASYNC110 - set as open_runner exits; no event for it
        await trio.sleep(0.02)


async def until(check: Callable[[], bool], *events: Callable[[], trio.Event]) -> None:
    while not check():
        with trio.move_on_after(0.05):  # the claims happen on other tasks' polls
            await events[0]().wait()


async def test_two_runners_deliver_each_event_once_while_both_keep_claiming(
    pg_dsn: str, clock: FakeClock
) -> None:
    calls: list[tuple[str, str]] = []
    release = trio.Event()
    a_cb, b_cb = Held(calls, "a", release), Held(calls, "b", release)
    claims_a, claims_b = [0], [0]
    fetch = ScriptedFetch()
    config = {"poll_interval": 0.02, "jobs_per_caller": 8}
    async with (
        open_store(pg_dsn) as store_a,
        open_store(pg_dsn) as store_b,
        open_runner(store_a, fetch, Config(on_terminal=a_cb, **config), now=clock) as a,
        open_runner(store_b, fetch, Config(on_terminal=b_cb, **config), now=clock) as b,
    ):
        store_a.claim_delivery = counting(store_a.claim_delivery, claims_a)  # type: ignore[method-assign]
        store_b.claim_delivery = counting(store_b.claim_delivery, claims_b)  # type: ignore[method-assign]
        jobs = []
        # Fewer events than a runner's delivery slots: each keeps a free one and goes on
        # claiming while all are held.
        for i in range(CONCURRENCY - 1):
            runner = a if i % 2 else b
            job_id, _ = await runner.submit("c", "user", urls(f"x{i}"))
            jobs.append(job_id)
        for job_id in jobs:
            await (a if jobs.index(job_id) % 2 else b).wait(job_id)
        await until(lambda: len(calls) >= len(jobs), lambda: a_cb.called)
        # Every event is leased and held: both runners go on claiming, and get nothing.
        seen_a, seen_b = claims_a[0], claims_b[0]
        await until(lambda: claims_a[0] > seen_a + 3 and claims_b[0] > seen_b + 3, trio.Event)
        assert len(calls) == len(jobs)
        release.set()
        for job_id in jobs:
            await delivery_reaches(a, job_id, state="delivered", others=(b,))
    assert len(calls) == len({event_id for _, event_id in calls}) == len(jobs)  # each once
    assert {name for name, _ in calls} <= {"a", "b"}


async def test_a_lapsed_lease_or_a_gone_runner_hands_the_event_to_another(
    pg_dsn: str, clock: FakeClock
) -> None:
    calls: list[tuple[str, str]] = []
    never, at_once = trio.Event(), trio.Event()
    at_once.set()
    a_cb, b_cb = Held(calls, "a", never), Held(calls, "b", at_once)
    fetch = ScriptedFetch()

    async def serve(store: Any, callback: Held, stop: trio.Event, *, task_status: Any) -> None:
        config = Config(on_terminal=callback, poll_interval=0.02)
        async with open_runner(store, fetch, config, now=clock) as runner:
            task_status.started(runner)
            await stop.wait()

    async with (
        open_store(pg_dsn) as store_a,
        open_store(pg_dsn) as store_b,
        trio.open_nursery() as nursery,
    ):
        a_may_claim, b_may_claim = gate(store_a), gate(store_b)
        a_may_claim.set()
        stop_a, stop_b = trio.Event(), trio.Event()
        a = await nursery.start(serve, store_a, a_cb, stop_a)
        b = await nursery.start(serve, store_b, b_cb, stop_b)
        first, _ = await a.submit("c", "user", urls("one"))
        await until(lambda: len(calls) >= 1, lambda: a_cb.called)
        assert calls[0][0] == "a"
        # a is alive, its attempt stuck, and holds the lease; once it lapses, b takes over.
        a_may_claim = gate(store_a)
        b_may_claim.set()
        await until_claimed(store_b, 3)
        assert len(calls) == 1  # b claims and gets nothing while a's lease stands
        clock.advance(LEASE + 1)
        await until(lambda: len(calls) >= 2, lambda: b_cb.called)
        assert calls[1] == ("b", calls[0][1])
        await delivery_reaches(b, first, state="delivered")
        # a claims the next event and goes away mid-delivery (its runner row with it): b takes
        # it over without waiting for the lease to lapse.
        b_may_claim = gate(store_b)
        a_may_claim.set()
        second, _ = await a.submit("c2", "user", urls("two"))
        await until(lambda: len(calls) >= 3, lambda: a_cb.called)
        assert calls[2][0] == "a"
        stop_a.set()
        await until_stopped(a)
        gone = await store_b.get_delivery(second, now=clock())
        assert gone is not None and gone.state == "pending"  # a's lease stands; a is gone
        b_may_claim.set()
        await until(lambda: len(calls) >= 4, lambda: b_cb.called)
        assert calls[3] == ("b", calls[2][1])
        await delivery_reaches(b, second, state="delivered")
        stop_b.set()
        never.set()
