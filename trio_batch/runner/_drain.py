"""What the runner knows about one job it is draining, and how a cancel reaches the drain.

A cancel reaches a drain from two places: :meth:`Runner.cancel` in this process, and the
runner's poll of the store for jobs cancelled through another runner sharing the database
(:mod:`._cluster`). Both go through :meth:`_Drain.request_cancel`, so they behave alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio

from .._model import Job, Target

__all__ = ["_Drain"]


@dataclass(eq=False, slots=True)
class _Drain:
    """What the runner knows about one job it is draining."""

    job_id: str
    caller: str
    targets: tuple[Target, ...]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    stopped: trio.Event = field(default_factory=trio.Event)
    in_flight: int | None = None
    # Its task was started: False while its job is being created (and for good if the create
    # raised, the job perhaps committed: the poll adopts it under a drain of its own).
    started: bool = False
    # The job as the store last answered for it; each outcome write passes it on as ``seen``,
    # so that the store need not read the job back.
    job: Job | None = None
    # The CancelScope around the fetch in flight: its deadline is the target timeout, moved
    # earlier by a cancel when Config.cancel_grace is set.
    fetch_scope: trio.CancelScope | None = None
    # The CancelScope around a wait between two attempts at a target: a cancel cuts it short.
    backoff_scope: trio.CancelScope | None = None
    cancel_requested: bool = False
    cancel_deadline: float | None = None  # trio time at which the cancel grace runs out
    # Set once every cancel() call has finished writing; cancel_failed if one could not.
    cancel_writes: int = 0
    cancel_settled: trio.Event = field(default_factory=trio.Event)
    cancel_failed: bool = False
    # The job is no longer this runner's (another runner reaped it): the drain was stopped and
    # writes nothing more.
    lost: bool = False
    # The job's span, from the runner's Tracing (None when tracing is off).
    span: Any = None
    # Set, and dropped, each time an outcome is stored: wakes watchers. Made only when a
    # watcher asks (most jobs have none), so a drain with no watcher makes no event per target.
    _stored: trio.Event | None = None

    def next_stored(self) -> trio.Event:
        """The event set when the next outcome is stored (or the drain stops)."""
        if self._stored is None:
            self._stored = trio.Event()
        return self._stored

    def notify_stored(self) -> None:
        stored, self._stored = self._stored, None
        if stored is not None:
            stored.set()

    def request_cancel(self, grace: float | None, *, stored: bool = False) -> None:
        """Start no further target; cut the fetch in flight at ``grace`` seconds from now.

        ``stored``: the job is already marked ``cancelled`` in the store (by another runner),
        so no write of this runner's is awaited before the drain stops. Calling this again
        changes nothing: the first grace deadline stands.
        """
        # Flag first: the drain checks it before each target, so none starts after this.
        self.cancel_requested = True
        if grace is not None and self.cancel_deadline is None:
            self.cancel_deadline = trio.current_time() + grace
            if self.fetch_scope is not None:
                self.fetch_scope.deadline = min(self.fetch_scope.deadline, self.cancel_deadline)
        if self.backoff_scope is not None:
            self.backoff_scope.cancel()  # no further attempt: store the last failure now
        if stored and self.cancel_writes == 0:
            self.cancel_settled.set()

    def lose(self) -> None:
        """The job was reaped by another runner: stop the drain now; it writes nothing more."""
        self.lost = True
        self.scope.cancel()
