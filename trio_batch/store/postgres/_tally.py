"""The PostgreSQL store's reused count of terminal jobs.

:meth:`~._reads.PostgresReads.counts` counts the terminal jobs from a snapshot and reuses that
count for a while, adding the jobs this store finishes. Every call of the store runs on its
one store thread, so the count and the commits that finish jobs come one after another.
"""

from __future__ import annotations

from ..._model import Job

__all__ = ["Tallies", "TerminalTally"]

#: status -> [jobs, targets, done, failed] of the terminal jobs.
Tallies = dict[str, list[int]]


class TerminalTally:
    """The reused count: :meth:`held` before a count, :meth:`keep` after a fresh one,
    :meth:`count` for each job this store finishes, :meth:`drop` when it cannot tell."""

    def __init__(self) -> None:
        self._held: tuple[float, Tallies] | None = None  # (the now it was read at, tallies)

    def held(self, now: float, max_age: float) -> Tallies | None:
        """A copy of the tally if it is younger than ``max_age`` at ``now``; else None (a
        fresh count is due)."""
        held = self._held
        if held is not None and 0 <= now - held[0] < max_age:
            return {status: list(t) for status, t in held[1].items()}
        return None

    def keep(self, now: float, tallies: Tallies) -> None:
        """A fresh count, read at ``now``."""
        self._held = (now, tallies)

    def count(self, job: Job) -> None:
        """``job`` was just made terminal by this store: count it in the tally."""
        if self._held is not None:
            tally = self._held[1].setdefault(str(job.status), [0, 0, 0, 0])
            for i, value in enumerate((1, job.targets_total, job.targets_done, job.targets_failed)):
                tally[i] += value

    def drop(self) -> None:
        """This store changed terminal jobs in ways it cannot tally: count them again."""
        self._held = None
