"""The PostgreSQL store's reused count of terminal jobs, kept right across two threads.

:meth:`~._reads.PostgresReads.counts` counts the terminal jobs from a snapshot on the store
thread and reuses that count for a while, adding the jobs this store finishes. Outcome writes
commit from trio's thread too (:mod:`._loop_outcomes`): a job such a write finishes could be
in a fresh count's snapshot or not, depending on which came first, so it is counted into the
tally only if no fresh count overlapped its commit; otherwise the tally is dropped and read
again at the next call. A lock (held for a few assignments, never across I/O) orders the two.
"""

from __future__ import annotations

import threading

from ..._model import Job

__all__ = ["Tallies", "TerminalTally"]

#: status -> [jobs, targets, done, failed] of the terminal jobs.
Tallies = dict[str, list[int]]


class TerminalTally:
    """The reused count: :meth:`start_read` / :meth:`keep` around a fresh count, :meth:`count`
    for each job this store finishes, :meth:`drop` when it cannot tell."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: tuple[float, Tallies] | None = None  # (the now it was read at, tallies)
        self._generation = 0  # moves at every fresh count's start and end, and every drop
        self._reading = False

    def start_read(self, now: float, max_age: float) -> tuple[Tallies | None, int]:
        """A copy of the tally if it is younger than ``max_age`` at ``now``; else None, and
        a fresh count starts: its token for :meth:`keep`."""
        with self._lock:
            held = self._held
            if held is not None and 0 <= now - held[0] < max_age:
                return {status: list(t) for status, t in held[1].items()}, self._generation
            self._generation += 1
            self._reading = True
            return None, self._generation

    def keep(self, token: int, now: float, tallies: Tallies | None) -> None:
        """The fresh count ``token`` is over (``tallies`` None: it failed): kept unless a
        finished job could not be told in or out of it meanwhile."""
        with self._lock:
            self._reading = False
            if tallies is not None and token == self._generation:
                self._held = (now, tallies)
            self._generation += 1

    def mark(self) -> int:
        """Taken before a commit made off the store thread, for :meth:`count`."""
        return self._generation

    def count(self, job: Job, mark: int | None = None) -> None:
        """``job`` was just made terminal by this store: count it in the tally. ``mark``: the
        commit's :meth:`mark` if it was made off the store thread."""
        with self._lock:
            if mark is not None and (mark != self._generation or self._reading):
                self._drop()  # a fresh count overlapped the commit: in its snapshot or not
                return
            if self._held is not None:
                tally = self._held[1].setdefault(str(job.status), [0, 0, 0, 0])
                for i, value in enumerate(
                    (1, job.targets_total, job.targets_done, job.targets_failed)
                ):
                    tally[i] += value

    def drop(self) -> None:
        """This store changed terminal jobs in ways it cannot tally: count them again."""
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        self._held = None
        self._generation += 1
