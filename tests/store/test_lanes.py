"""Lanes: group commits side by side, one per connection (store/_lanes.py).

A write joins the group with the fewest writes waiting, so concurrent writers spread over the
groups and their commits run at the same time; a writer alone keeps to the group it was alone
in, where it commits without yielding. With fake commits that record what each got.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from trio_batch.store._lanes import Lanes


class Recorder:
    """A commit function per lane: records each batch, answers each write doubled, and
    waits for ``gate`` (if set) so that commits can be seen in flight together."""

    def __init__(self, lanes: int) -> None:
        self.batches: list[tuple[int, list[int]]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.gate: trio.Event | None = None
        self.fail: set[int] = set()
        self.commits = [self._commit_for(lane) for lane in range(lanes)]

    def _commit_for(self, lane: int) -> Callable[[list[int]], Awaitable[list[int | Exception]]]:
        async def commit(batch: list[int]) -> list[int | Exception]:
            self.batches.append((lane, batch))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                if self.gate is not None:
                    await self.gate.wait()
                await trio.lowlevel.checkpoint()
                if lane in self.fail:
                    raise RuntimeError(f"lane {lane} failed")
                return [w * 2 for w in batch]
            finally:
                self.in_flight -= 1

        return commit


def test_lanes_need_a_commit() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Lanes([])


async def test_concurrent_writers_spread_over_the_lanes_and_commit_at_once() -> None:
    rec = Recorder(2)
    lanes: Lanes[int, int] = Lanes(rec.commits)
    rec.gate = trio.Event()
    answers: dict[int, int] = {}

    async def writer(i: int) -> None:
        answers[i] = await lanes.write(i, writer=f"job{i}")

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(writer, i)
        await trio.testing.wait_all_tasks_blocked()
        assert rec.in_flight == 2  # one commit on each lane, both under way
        rec.gate.set()
    assert answers == {i: i * 2 for i in range(8)}
    by_lane = {lane: sum(len(b) for ln, b in rec.batches if ln == lane) for lane in (0, 1)}
    assert by_lane == {0: 4, 1: 4}
    assert rec.most_in_flight == 2


async def test_a_lone_writer_keeps_to_one_lane() -> None:
    rec = Recorder(3)
    lanes: Lanes[int, int] = Lanes(rec.commits)
    for i in range(5):
        assert await lanes.write(i, writer="job") == i * 2
    assert [lane for lane, _ in rec.batches] == [0] * 5


async def test_a_failed_commit_fails_its_own_writes_and_frees_its_lane() -> None:
    rec = Recorder(2)
    rec.fail = {0}
    lanes: Lanes[int, int] = Lanes(rec.commits)
    with pytest.raises(RuntimeError, match="lane 0"):
        await lanes.write(1, writer="a")
    rec.fail = set()
    # Lane 0 counts nothing waiting any more: a lone writer goes there again.
    assert await lanes.write(2, writer="a") == 4
    assert [lane for lane, _ in rec.batches] == [0, 0]
