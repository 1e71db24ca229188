"""Who gets the next processing worker: the pool's fair shares, through their own API.

Each holder is a task that takes a slot and keeps it until the test sets its ``done`` event;
``wait_all_tasks_blocked`` lets every task reach its slot or its place in the queue. Grants
are decided in the releasing task, so what is checked never depends on which task trio runs
first.
"""

from __future__ import annotations

import random
from collections.abc import Hashable

import pytest
import trio
import trio.testing

from trio_batch.fetchers._shares import FairShares


class Holder:
    """A task of ``caller`` that holds one slot of ``shares`` until ``done`` is set."""

    def __init__(self, shares: FairShares, caller: Hashable, granted: list[Holder]) -> None:
        self.shares = shares
        self.caller = caller
        self.granted = granted
        self.got = trio.Event()
        self.done = trio.Event()
        self.scope = trio.CancelScope()

    def __repr__(self) -> str:
        return f"Holder({self.caller!r})"

    async def run(self) -> None:
        with self.scope:
            async with self.shares.hold(self.caller):
                self.granted.append(self)
                self.got.set()
                await self.done.wait()


class Pool:
    """Holders started in one nursery, and the order in which they were granted a slot."""

    def __init__(self, shares: FairShares, nursery: trio.Nursery) -> None:
        self.shares = shares
        self.nursery = nursery
        self.granted: list[Holder] = []

    async def ask(self, caller: Hashable) -> Holder:
        """Start a holder of ``caller``; return once it holds a slot or waits in the queue."""
        holder = Holder(self.shares, caller, self.granted)
        self.nursery.start_soon(holder.run)
        await trio.testing.wait_all_tasks_blocked()
        return holder

    async def end(self, holder: Holder) -> None:
        """Let ``holder`` give its slot back, and the next waiter (if any) take it."""
        assert holder.got.is_set()
        holder.done.set()
        await trio.testing.wait_all_tasks_blocked()


def counts(shares: FairShares) -> tuple[int, dict[Hashable, int], dict[Hashable, int]]:
    stats = shares.statistics()
    return stats.total, stats.held, stats.waiting


async def test_a_caller_holding_none_gets_a_slot_while_two_busy_callers_hold_the_rest() -> None:
    # The case: two callers fill the pool; per-caller caps alone left a third waiting
    # until one of their (hostile, long) targets ended.
    shares = FairShares(soft=2, per_caller=1, ceiling=4)
    async with trio.open_nursery() as nursery:
        pool = Pool(shares, nursery)
        a1, b1, a2, b2 = [await pool.ask(c) for c in "abab"]
        assert a1.got.is_set() and b1.got.is_set()
        assert not a2.got.is_set() and not b2.got.is_set()  # busy callers wait their turn
        c1 = await pool.ask("c")
        assert c1.got.is_set()  # at once: nobody released anything
        assert counts(shares) == (3, {"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 1})
        d1 = await pool.ask("d")
        e1 = await pool.ask("e")
        assert d1.got.is_set() and not e1.got.is_set()  # the ceiling: 4
        assert counts(shares) == (4, {"a": 1, "b": 1, "c": 1, "d": 1}, {"a": 1, "b": 1, "e": 1})
        await pool.end(c1)  # past soft, a freed slot goes only to a caller holding none
        assert e1.got.is_set() and not a2.got.is_set() and not b2.got.is_set()
        nursery.cancel_scope.cancel()
    assert counts(shares) == (0, {}, {})


async def test_a_freed_slot_goes_to_the_waiting_caller_holding_fewest() -> None:
    shares = FairShares(soft=3, per_caller=3, ceiling=3)
    async with trio.open_nursery() as nursery:
        pool = Pool(shares, nursery)
        _, _, b1 = [await pool.ask(c) for c in "aab"]
        a3 = await pool.ask("a")  # queued first
        b2 = await pool.ask("b")
        await pool.end(b1)
        assert b2.got.is_set() and not a3.got.is_set()  # b holds none now, a holds two
        nursery.cancel_scope.cancel()


async def test_callers_holding_as_many_take_turns_whoever_queued_first() -> None:
    shares = FairShares(soft=3, per_caller=3, ceiling=3)
    async with trio.open_nursery() as nursery:
        pool = Pool(shares, nursery)
        _, _, c1 = [await pool.ask(c) for c in "bac"]  # b served before a
        a2 = await pool.ask("a")  # a queued first
        b2 = await pool.ask("b")
        await pool.end(c1)
        assert b2.got.is_set() and not a2.got.is_set()  # both hold one: b was served longer ago
        nursery.cancel_scope.cancel()


async def test_one_callers_waiters_go_in_order_and_callers_alternate() -> None:
    shares = FairShares(soft=2, per_caller=2, ceiling=2)
    async with trio.open_nursery() as nursery:
        pool = Pool(shares, nursery)
        x1, x2 = [await pool.ask("x") for _ in range(2)]
        a1, a2, a3 = [await pool.ask("a") for _ in range(3)]
        b1, b2 = [await pool.ask("b") for _ in range(2)]
        for holder in (x1, x2, a1, b1, a2, b2):
            await pool.end(holder)
        assert pool.granted == [x1, x2, a1, b1, a2, b2, a3]
        nursery.cancel_scope.cancel()


async def test_one_caller_never_holds_more_than_its_share_even_with_slots_free() -> None:
    shares = FairShares(soft=4, per_caller=2, ceiling=8)
    async with trio.open_nursery() as nursery:
        pool = Pool(shares, nursery)
        a1, _, a3 = [await pool.ask("a") for _ in range(3)]
        assert not a3.got.is_set()
        assert counts(shares) == (2, {"a": 2}, {"a": 1})
        await pool.end(a1)
        assert a3.got.is_set()
        nursery.cancel_scope.cancel()


async def test_a_cancelled_waiter_leaves_no_slot_taken_and_no_place_in_the_queue() -> None:
    shares = FairShares(soft=1, per_caller=1, ceiling=1)
    async with trio.open_nursery() as nursery:
        pool = Pool(shares, nursery)
        a1 = await pool.ask("a")
        b1 = await pool.ask("b")
        a2 = await pool.ask("a")
        b1.scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert counts(shares) == (1, {"a": 1}, {"a": 1})
        await pool.end(a1)
        assert a2.got.is_set() and not b1.got.is_set()
        await pool.end(a2)
    assert counts(shares) == (0, {}, {})


async def test_a_slot_handed_over_as_its_waiter_is_cancelled_goes_on_to_the_next() -> None:
    shares = FairShares(soft=1, per_caller=1, ceiling=1)
    async with trio.open_nursery() as nursery:
        pool = Pool(shares, nursery)
        await shares.acquire("a")
        b1 = await pool.ask("b")
        c1 = await pool.ask("c")
        shares.release("a")  # hands the slot to b1 ...
        b1.scope.cancel()  # ... which is cancelled before it runs
        await trio.testing.wait_all_tasks_blocked()
        assert c1.got.is_set()
        assert counts(shares) == (1, {"c": 1}, {})
        await pool.end(c1)
    assert counts(shares) == (0, {}, {})


async def test_a_cancelled_acquire_takes_nothing_even_with_a_slot_free() -> None:
    shares = FairShares(soft=1, per_caller=1, ceiling=1)
    with trio.CancelScope() as scope:
        scope.cancel()
        await shares.acquire("a")
    assert counts(shares) == (0, {}, {})
    with pytest.raises(RuntimeError, match="holds no slot"):
        shares.release("a")


@pytest.mark.parametrize("seed", range(4))
async def test_no_waiter_is_left_waiting_for_a_slot_it_may_take(seed: int) -> None:
    # Random arrivals, ends and cancellations: after each, the limits hold and every free
    # slot a waiter may take has been handed over.
    rng = random.Random(seed)
    soft, per_caller, ceiling = 3, 2, 5
    shares = FairShares(soft, per_caller, ceiling)
    async with trio.open_nursery() as nursery:
        pool = Pool(shares, nursery)
        live: list[Holder] = []
        for _ in range(300):
            holding = [h for h in live if h.got.is_set()]
            waiting = [h for h in live if not h.got.is_set()]
            step = rng.random()
            if step < 0.45 or not live:
                live.append(await pool.ask(rng.choice("abcdef")))
            elif step < 0.85 and holding:
                ended = rng.choice(holding)
                live.remove(ended)
                await pool.end(ended)
            elif waiting:
                cancelled = rng.choice(waiting)
                live.remove(cancelled)
                cancelled.scope.cancel()
                await trio.testing.wait_all_tasks_blocked()
            total, held, queued = counts(shares)
            assert total == sum(held.values()) == sum(h.got.is_set() for h in live) <= ceiling
            assert all(n <= per_caller for n in held.values())
            assert sum(queued.values()) == sum(not h.got.is_set() for h in live)
            for caller in queued:
                mine = held.get(caller, 0)
                may_take = total < ceiling if mine == 0 else total < soft and mine < per_caller
                assert not may_take, (caller, total, held, queued)
        nursery.cancel_scope.cancel()
    assert counts(shares) == (0, {}, {})


def test_the_limits_must_nest() -> None:
    for soft, per_caller, ceiling in [(0, 1, 1), (2, 3, 4), (2, 1, 1), (1, 0, 1)]:
        with pytest.raises(ValueError, match="per_caller <= soft <= ceiling"):
            FairShares(soft, per_caller, ceiling)
