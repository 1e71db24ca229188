"""Waiting for a runner's webhook deliveries: on its attempts, never on time."""

from __future__ import annotations

from typing import Any

import trio

from trio_batch import Delivery, Runner


async def _first_of(events: list[trio.Event]) -> None:
    async with trio.open_nursery() as nursery:

        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait, event)


async def delivery_reaches(
    runner: Runner,
    job_id: str,
    *,
    state: str | None = None,
    attempts: int | None = None,
    others: tuple[Runner, ...] = (),
) -> Delivery:
    """The job's delivery once it is in ``state`` with at least ``attempts`` recorded; read
    again after each attempt ``runner`` (or one of ``others``) finishes."""
    while True:
        events = [r._deliveries.attempted for r in (runner, *others)]
        found = await runner.delivery(job_id)
        if (
            found is not None
            and (state is None or found.state == state)
            and (attempts is None or found.attempts >= attempts)
        ):
            return found
        await _first_of(events)


def deliveries_of(runner: Runner) -> Any:
    """The runner's delivery task (tests wake it after moving the fake wall clock)."""
    return runner._deliveries
