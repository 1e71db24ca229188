"""Jobs whose create was in doubt: the store raised :class:`StoreUnavailable`, yet may have
committed the job (the connection was lost after the server's commit, before its answer).

Such a job is live and this runner's, but has no drain. The caller's retry finds it by its
idempotency key (a reuse); the runner then takes its drain from here and starts it, so a job
this runner created is drained in the end, not left until its lease lapses.
"""

from __future__ import annotations

from collections.abc import Callable

from .._model import Job
from ._drain import _Drain

__all__ = ["IN_DOUBT_MAX", "InDoubt"]

#: Most creates in doubt remembered at once; past it the oldest is forgotten (its job, if it
#: was committed, then waits for its lease to lapse, as before).
IN_DOUBT_MAX = 1024


class InDoubt:
    """The drains of this runner's creates in doubt, each until its job's lease would lapse."""

    def __init__(self, ttl: float, now: Callable[[], float]) -> None:
        self._ttl = ttl
        self._now = now
        # Oldest first: every entry lives ``ttl``, so the front lapses first.
        self._drains: dict[str, tuple[float, _Drain]] = {}

    def add(self, drain: _Drain) -> None:
        """Remember ``drain``, whose job's create raised after it may have committed."""
        now = self._now()
        self._prune(now)
        if len(self._drains) >= IN_DOUBT_MAX:
            del self._drains[next(iter(self._drains))]
        self._drains[drain.job_id] = (now + self._ttl, drain)

    def take(self, job: Job) -> _Drain | None:
        """A fresh drain for ``job`` (a reuse just found it) if its create was in doubt here
        and it is still live; None otherwise. Each job's drain is taken once."""
        self._prune(self._now())
        entry = self._drains.pop(job.id, None)
        if entry is None or job.is_terminal:
            return None
        old = entry[1]
        # Never started, so none of its targets was fetched: the drain starts from the first.
        return _Drain(old.job_id, old.caller, old.targets, span=old.span)

    def _prune(self, now: float) -> None:
        while self._drains:
            job_id, (lapses, _) = next(iter(self._drains.items()))
            if lapses > now:
                return
            del self._drains[job_id]

    def __len__(self) -> int:
        return len(self._drains)
