"""The PostgreSQL store's reads: a job, its status, the small view, one target, lists, counts.

Reads that must agree with themselves (a job and its targets) take one REPEATABLE READ, READ
ONLY snapshot; the others are one statement each. Reads are retried once on a fresh
connection if the one they ran on was lost (:meth:`PostgresConnection._run`): a read changes
nothing, so running it twice is safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..._model import (
    Job,
    JobState,
    TargetStatus,
    is_caller,
    is_job_id,
    is_target_index,
    with_running,
)
from .._filters import EVERY_JOB, JobFilter, filtered_queries, merge_pages
from .._pages import sized_targets_page, targets_page
from .._protocol import StoreCounts
from .._rows import forgettable, job_from_row, target_from_row
from . import _queries as q
from ._connection import Conn, Op, PostgresConnection
from ._tally import TerminalTally

__all__ = ["PostgresReads"]

T = TypeVar("T")

#: Default of :attr:`PostgresReads.terminal_counts_max_age`, in seconds.
TERMINAL_COUNTS_MAX_AGE = 30.0


class PostgresReads(PostgresConnection):
    """Reading jobs and targets; lapsed jobs read as absent."""

    def get_job(self, job_id: str, *, now: float) -> Job | None:
        """The job, or None if it is unknown, malformed or its lease has lapsed."""
        if not is_job_id(job_id):
            return None
        row = self._run(
            lambda c: self._one(c, Op.READ, q.GET_JOB, (job_id, now)).fetchone(), op=Op.READ
        )
        return None if row is None else job_from_row(row)

    @staticmethod
    def _get_job(conn: Conn, job_id: str, now: float) -> Job | None:
        """The job, read inside a transaction already open on ``conn``."""
        row = conn.execute(q.GET_JOB, (job_id, now)).fetchone()
        return None if row is None else job_from_row(row)

    def get_status(self, job_id: str, *, now: float) -> tuple[Job, list[TargetStatus]] | None:
        """The job and its targets in order, from one snapshot; the one due reads ``running``."""
        if not is_job_id(job_id):
            return None

        def read(conn: Conn) -> tuple[Job, list[TargetStatus]] | None:
            with self._tx(conn, Op.READ, snapshot=True):
                job = self._get_job(conn, job_id, now)
                if job is None:
                    return None
                rows = conn.execute(q.GET_TARGETS, (job_id,)).fetchall()
            return job, with_running(job, [target_from_row(row) for row in rows])

        return self._run(read, op=Op.READ)

    def list_jobs(self, *, now: float, caller: str | None = None, limit: int = 100) -> list[Job]:
        """Unexpired jobs, most recently active first; only ``caller``'s if given."""
        if caller is not None and not is_caller(caller):
            return []
        sql = q.LIST_JOBS if caller is None else q.LIST_JOBS_OF_CALLER
        params = {"caller": caller, "now": now, "limit": limit}
        rows = self._run(lambda c: self._one(c, Op.READ, sql, params).fetchall(), op=Op.READ)
        return [job_from_row(row) for row in rows]

    #: Seconds :meth:`counts` reuses its count of the terminal jobs.
    terminal_counts_max_age = TERMINAL_COUNTS_MAX_AGE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tally = TerminalTally()

    def counts(self, *, now: float) -> StoreCounts:
        """Unexpired jobs by status (every status present, zeros included), and their targets.

        The live jobs are counted at every call (the caps keep them few). Counting the terminal
        ones reads every unexpired job, so that count is reused for
        :attr:`terminal_counts_max_age` seconds of ``now`` (a ``/metrics`` scrape does not
        count a million rows each time), kept up to date with this store's own jobs that
        finish, and read again after this store fails, forgets or purges jobs. Other
        runners' finished jobs, jobs reaped by the heartbeat's own connection, and lapsed ones
        show within that age.
        """
        # Aged by the caller's clock, the one leases lapse by.
        held = self._tally.held(now, self.terminal_counts_max_age)

        def read(conn: Conn) -> tuple[list[Any], list[Any] | None]:
            with self._tx(conn, Op.READ, snapshot=True):
                live = conn.execute(q.COUNT_LIVE_BY_STATUS, (now,)).fetchall()
                terminal = None
                if held is None:
                    terminal = conn.execute(q.COUNT_TERMINAL_BY_STATUS, (now,)).fetchall()
            return live, terminal

        live, terminal = self._run(read, op=Op.READ)
        tallies = held
        if terminal is not None:
            tallies = {str(row[0]): [int(v) for v in row[1:]] for row in terminal}
            self._tally.keep(now, tallies)
        assert tallies is not None
        jobs = dict.fromkeys((str(s) for s in JobState), 0)
        total = done = failed = abandoned = 0
        for status, n, targets, ok, bad in [
            *((row[0], *map(int, row[1:])) for row in live),
            *((status, *tally) for status, tally in tallies.items()),
        ]:
            jobs[str(status)] += n
            total, done, failed = total + targets, done + ok, failed + bad
            if not JobState(status).is_live:
                abandoned += targets - ok
        return StoreCounts(jobs, total, done, failed, abandoned)

    def _count_finished(self, job: Job) -> None:
        """``job`` was just made terminal by this store: count it in the reused tally."""
        self._tally.count(job)

    def _recount_finished(self) -> None:
        """This store changed terminal jobs in ways it cannot tally: count them again."""
        self._tally.drop()

    def forget_job(self, job_id: str, *, caller: str | None = None, now: float) -> Job | None:
        """Delete a terminal job and its targets in one transaction; see ``JobStore``."""
        if not is_job_id(job_id):
            return None

        def forget(conn: Conn) -> Job | None:
            with self._tx(conn, Op.WRITE):
                row = conn.execute(q.GET_JOB_FOR_UPDATE, (job_id, now)).fetchone()
                job = forgettable(None if row is None else job_from_row(row), caller)
                if job is not None:
                    conn.execute(q.FORGET_JOB, (job_id,))
            return job

        forgotten = self._run(forget)
        if forgotten is not None:
            self._recount_finished()
        return forgotten

    def get_overview(
        self, job_id: str, *, now: float
    ) -> tuple[Job, list[TargetStatus], list[int]] | None:
        """The job, its targets without results, and each result's size; see ``JobStore``."""
        found = self._with_job(
            job_id, now, lambda c: c.execute(q.GET_TARGETS_WITHOUT_RESULTS, (job_id,)).fetchall()
        )
        if found is None:
            return None
        job, rows = found
        targets = [target_from_row(row[:-1]) for row in rows]
        return job, with_running(job, targets), [int(row[-1]) for row in rows]

    def get_target(self, job_id: str, idx: int, *, now: float) -> tuple[Job, TargetStatus] | None:
        """The job and one target with its result; see ``JobStore``."""
        if not is_target_index(idx):
            return None
        found = self._with_job(
            job_id, now, lambda c: c.execute(q.GET_ONE_TARGET, (job_id, idx)).fetchone()
        )
        if found is None:
            return None
        job, row = found
        if row is None:
            return None
        return job, with_running(job, [target_from_row(row)])[0]

    def get_outcomes(
        self,
        job_id: str,
        start: int,
        *,
        now: float,
        limit: int,
        max_bytes: int | None = None,
        results_up_to: int | None = None,
    ) -> tuple[Job, list[TargetStatus]] | None:
        """The job and a page of its targets with an outcome, from ``start``; see ``JobStore``."""
        if max_bytes is None:
            sql, values = targets_page(
                job_id,
                start - 1,
                limit=limit,
                outcomes=True,
                placeholder="%s",
                results_up_to=results_up_to,
            )
        else:
            sql, values = sized_targets_page(
                job_id,
                start - 1,
                limit=limit,
                max_bytes=max_bytes,
                outcomes=True,
                results_up_to=results_up_to,
            )
        found = self._with_job(job_id, now, lambda c: c.execute(sql, values).fetchall())
        if found is None:
            return None
        job, rows = found
        return job, [target_from_row(row) for row in rows]

    def list_caller_jobs(
        self,
        caller: str,
        *,
        now: float,
        limit: int,
        before: tuple[float, str] | None = None,
        where: JobFilter = EVERY_JOB,
    ) -> list[Job]:
        """One page of ``caller``'s unexpired jobs that ``where`` lists, newest first; see
        ``JobStore``."""
        if not is_caller(caller):
            return []
        queries = [
            (sql.replace("?", "%s"), params)
            for sql, params in filtered_queries(
                q.JOB_COLUMN_NAMES,
                caller,
                where,
                now=now,
                limit=limit,
                before=before,
                jobs=q.JOBS_NOW,
            )
        ]

        def read(conn: Conn) -> list[list[Job]]:
            with self._tx(conn, Op.READ, snapshot=True):
                return [
                    [job_from_row(row) for row in conn.execute(sql, params).fetchall()]
                    for sql, params in queries
                ]

        return merge_pages(self._run(read, op=Op.READ), limit)

    def get_targets_after(
        self,
        job_id: str,
        after: int,
        *,
        now: float,
        limit: int,
        max_bytes: int | None = None,
        results: bool = True,
    ) -> tuple[Job, list[TargetStatus]] | None:
        """The job and a page of its targets after ``after``, in order; see ``JobStore``."""
        if max_bytes is None or not results:  # without results nothing is loaded
            sql, values = targets_page(
                job_id, after, limit=limit, results=results, placeholder="%s"
            )
        else:
            sql, values = sized_targets_page(job_id, after, limit=limit, max_bytes=max_bytes)
        found = self._with_job(job_id, now, lambda c: c.execute(sql, values).fetchall())
        if found is None:
            return None
        job, rows = found
        return job, with_running(job, [target_from_row(row) for row in rows])

    def latest_retry(self, job_id: str, *, caller: str, now: float) -> Job | None:
        """The newest unexpired retry of ``job_id`` by ``caller``; see ``JobStore``."""
        if not is_job_id(job_id) or not is_caller(caller):
            return None
        values = (job_id, caller, now)
        row = self._run(
            lambda c: self._one(c, Op.READ, q.LATEST_RETRY, values).fetchone(), op=Op.READ
        )
        return None if row is None else job_from_row(row)

    def retries(self, job_id: str, *, caller: str, now: float, limit: int) -> list[Job]:
        """The unexpired retries of ``job_id`` by ``caller``, newest first; see ``JobStore``."""
        if not is_job_id(job_id) or not is_caller(caller):
            return []
        values = (job_id, caller, now, limit)
        rows = self._run(lambda c: self._one(c, Op.READ, q.RETRIES, values).fetchall(), op=Op.READ)
        return [job_from_row(row) for row in rows]

    def _with_job(self, job_id: str, now: float, read: Callable[[Conn], T]) -> tuple[Job, T] | None:
        """The unexpired job and what ``read`` reads, from one snapshot; None without the job."""
        if not is_job_id(job_id):
            return None

        def both(conn: Conn) -> tuple[Job, T] | None:
            with self._tx(conn, Op.READ, snapshot=True):
                job = self._get_job(conn, job_id, now)
                return None if job is None else (job, read(conn))

        return self._run(both, op=Op.READ)
