"""The SQLite store's reads: a job, its status, listings and counts, each from one snapshot.

:class:`StoreReads` is the reading half of :class:`~trio_batch.store.sqlite.Store` (which
inherits it); lapsed jobs read as absent. Plain and synchronous, as the whole store is.
"""

from __future__ import annotations

import time

from ..._model import Job, JobState, TargetStatus, is_caller, is_job_id, with_running
from .._filters import EVERY_JOB, JobFilter, filtered_queries, merge_pages
from .._protocol import StoreCounts
from .._rows import job_from_row as _job
from .._rows import target_from_row as _target
from . import _queries as q
from ._connection import Connection

__all__ = ["StoreReads"]


class StoreReads(Connection):
    """The reads of :class:`~trio_batch.store.sqlite.Store`; see its docstring."""

    def get_job(self, job_id: str, *, now: float | None = None) -> Job | None:
        """The job with this id, or None if it is unknown, malformed or its lease has lapsed."""
        if not is_job_id(job_id):
            return None
        now = time.time() if now is None else now
        with self._locked():
            row = self.db.execute(q.GET_JOB, (job_id, now)).fetchone()
        return None if row is None else _job(row)

    def get_status(
        self, job_id: str, *, now: float | None = None
    ) -> tuple[Job, list[TargetStatus]] | None:
        """The job and its targets in ``idx`` order, read from one snapshot.

        Returns None if the job is unknown, malformed or its lease has lapsed. The target due
        next in a ``running`` job reads as ``running`` (see the class docstring).
        """
        if not is_job_id(job_id):
            return None
        now = time.time() if now is None else now
        conn = self.db.conn  # straight to sqlite3: a status read is a hot path
        with self._snapshot():
            row = conn.execute(q.GET_JOB_AND_RESULTS_SIZE, (job_id, now)).fetchone()
            if row is None:
                return None
            rows = conn.execute(q.GET_TARGETS, (job_id,)).fetchall()
        job = _job(row[:-1])
        return job, with_running(job, [_target(row) for row in rows])

    def list_jobs(
        self, *, caller: str | None = None, limit: int = 100, now: float | None = None
    ) -> list[Job]:
        """Unexpired jobs, most recently active first; only ``caller``'s if given."""
        now = time.time() if now is None else now
        if caller is not None and not is_caller(caller):
            return []
        with self._locked():
            if caller is None:
                rows = self.db.execute(q.LIST_JOBS, (now, limit)).fetchall()
            else:
                rows = self.db.execute(q.LIST_JOBS_OF_CALLER, (caller, now, limit)).fetchall()
        return [_job(row) for row in rows]

    def list_caller_jobs(
        self,
        caller: str,
        *,
        now: float | None = None,
        limit: int = 100,
        before: tuple[float, str] | None = None,
        where: JobFilter = EVERY_JOB,
    ) -> list[Job]:
        """One page of ``caller``'s unexpired jobs that ``where`` lists, newest first; see
        ``JobStore``."""
        if not is_caller(caller):
            return []
        now = time.time() if now is None else now
        queries = filtered_queries(
            q.JOB_COLUMN_NAMES, caller, where, now=now, limit=limit, before=before
        )
        with self._snapshot():
            pages = [[_job(row) for row in self.db.execute(sql, params)] for sql, params in queries]
        return merge_pages(pages, limit)

    def counts(self, *, now: float | None = None) -> StoreCounts:
        """Unexpired jobs by status (every status present, zeros included), and their targets."""
        now = time.time() if now is None else now
        with self._snapshot():
            by_status = self.db.execute(q.COUNT_BY_STATUS, (now,)).fetchall()
            total, done, failed, abandoned = self.db.execute(q.SUM_TARGETS, (now,)).fetchone()
        jobs = dict.fromkeys((str(s) for s in JobState), 0)
        jobs.update((str(status), int(count)) for status, count in by_status)
        return StoreCounts(jobs, int(total), int(done), int(failed), int(abandoned))
