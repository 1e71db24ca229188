"""Several group commits side by side, one per connection: more than one commit at a time.

One connection runs its statements one after another on the server; a backend whose server
can run several at once (PostgreSQL) spreads its outcome writes over a few connections, each
with its own :class:`~._group_commit.GroupCommit`. Each writer still waits for its own commit,
so its writes stay in order whichever group takes each of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

import trio

from ._group_commit import GroupCommit

__all__ = ["Lanes"]

W = TypeVar("W")
A = TypeVar("A")


class Lanes(Generic[W, A]):
    """Group commits made by ``commits`` (one each, typically one connection each); a write
    joins the group with the fewest writes waiting, preferring, among those, the one its
    writer was alone in last (where it commits at once, see :meth:`GroupCommit.alone`)."""

    def __init__(self, commits: Sequence[Callable[[list[W]], Awaitable[list[A | Exception]]]]):
        if not commits:
            raise ValueError("Lanes needs at least one commit function")
        self._groups = [GroupCommit(commit) for commit in commits]
        self._waiting = [0] * len(commits)  # writes given to each group and not answered yet

    def __len__(self) -> int:
        return len(self._groups)

    # Protected from KeyboardInterrupt as GroupCommit.write is: between the count and the
    # write, it would leave a group counted busy for good.
    @trio.lowlevel.enable_ki_protection
    async def write(self, write: W, *, writer: Hashable) -> A:
        """:meth:`GroupCommit.write` in the group chosen as above; the same guarantees (its
        cancellation included: it cannot be cancelled)."""
        if len(self._groups) == 1:  # nothing to choose: no count to keep either
            return await self._groups[0].write(write, writer=writer)
        lane = min(
            range(len(self._groups)),
            key=lambda i: (self._waiting[i], not self._groups[i].alone(writer)),
        )
        self._waiting[lane] += 1
        try:
            return await self._groups[lane].write(write, writer=writer)
        finally:
            self._waiting[lane] -= 1
