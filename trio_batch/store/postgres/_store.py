"""The PostgreSQL store's operations: jobs, targets, leases, caps, and the runners' registry.

Plain and synchronous (psycopg 3's sync API): nothing here knows about trio. One
:class:`PostgresStore` owns one connection and is used from one thread at a time (its store
thread); :class:`~trio_batch.store.postgres.PostgresJobStore` puts the async face on it.

The connection is in autocommit mode and every state change is one explicit transaction at
READ COMMITTED. Reads that must agree with themselves (a job and its targets) take one
REPEATABLE READ snapshot. Every statement is bounded by ``statement_timeout`` and every lock
wait (advisory locks included) by ``lock_timeout``.

Several runners share the database. What keeps them apart:

- **Creation** takes a cluster-wide advisory transaction lock before the reuse lookup, the caps
  counts and the insert, under READ COMMITTED, so each sees the others' committed jobs (under
  REPEATABLE READ the snapshot would predate the wait). A partial unique index allows one
  current job per ``(caller, idem_key)`` as a second line of defence (a job stops being
  current when a new one of its key replaces it after its lease lapsed).
- **Ownership and fencing**: a job records the runner that created it (``owner``). A runner's
  outcome writes only touch jobs it still owns; reaping a dead runner's jobs clears their
  owner, so a runner that comes back after being reaped writes nothing into them.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from ..._errors import JobLive, OutcomeExists, StoreError, StoreUnavailable
from ..._model import (
    Job,
    JobState,
    OutcomeWrite,
    Target,
    TargetStatus,
    final_status,
    is_job_id,
    with_running,
)
from .._protocol import StoreCounts
from .._rows import check_caps, job_from_row, new_job, target_from_row, write_values
from . import _queries as q
from ._errors import connection_lost
from ._schema import migrate

__all__ = ["PostgresStore", "safe_location"]

T = TypeVar("T")

_Conn = psycopg.Connection[Any]


class _AlreadyStored(Exception):
    """A retried outcome write found its first attempt committed; roll back the bump."""


def safe_location(conninfo: str) -> str:
    """``conninfo`` without its password, for messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"not a PostgreSQL connection string or URL: {exc}") from None
    params.pop("password", None)
    return "PostgreSQL " + psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})


def _millis(seconds: float) -> str:
    return str(max(1, round(seconds * 1000)))


class PostgresStore:
    """Jobs and targets in one PostgreSQL database, over one connection.

    Open one with :meth:`open`. A lost connection is reopened at the next call (each call
    tries once; the caller's retries give the backoff). ``runner_id`` is the runner this
    connection writes for (None: no runner; its jobs have no owner).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        lock_timeout: float,
        statement_timeout: float,
        connect_timeout: float,
    ) -> None:
        self.conninfo = conninfo
        self.location = safe_location(conninfo)
        self.lock_timeout = lock_timeout
        self.statement_timeout = statement_timeout
        self.connect_timeout = connect_timeout
        self.runner_id: str | None = None
        self._conn: _Conn | None = None
        # (job_id, idx) of outcome writes whose commit was cut off: they may have committed.
        self._maybe_committed: set[tuple[str, int]] = set()

    @classmethod
    def open(
        cls,
        conninfo: str,
        *,
        lock_timeout: float = 5.0,
        statement_timeout: float = 30.0,
        connect_timeout: float = 10.0,
    ) -> PostgresStore:
        """Connect to ``conninfo`` (a URL or libpq keywords) and create or migrate the schema.

        Raises :class:`StoreError` if the server cannot be reached or refuses us, and
        :class:`SchemaVersionError` for a newer or foreign schema.
        """
        store = cls(
            conninfo,
            lock_timeout=lock_timeout,
            statement_timeout=statement_timeout,
            connect_timeout=connect_timeout,
        )
        try:
            migrate(store.connection(), store.location)
        except psycopg.Error as exc:
            store.close()
            raise StoreError(f"cannot open {store.location} as a trio_batch store: {exc}") from exc
        except BaseException:
            store.close()
            raise
        return store

    def connection(self) -> _Conn:
        """The open connection, reconnecting first if it was lost."""
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        conn = psycopg.connect(
            self.conninfo,
            autocommit=True,
            connect_timeout=max(1, round(self.connect_timeout)),
            application_name="trio_batch",
        )
        try:
            for name, value in (
                ("statement_timeout", _millis(self.statement_timeout)),
                ("lock_timeout", _millis(self.lock_timeout)),
                # A transaction left open by a stuck client is ended by the server.
                ("idle_in_transaction_session_timeout", _millis(2 * self.statement_timeout)),
            ):
                conn.execute(q.SET_SETTING, (name, value))
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def close(self) -> None:
        """Close the connection; a later call would open a new one."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _forget_if_lost(self, exc: psycopg.Error) -> None:
        if connection_lost(exc, self._conn):
            self.close()  # reopened at the next call

    # ----------------------------------------------------------------------------------------
    # Runners

    def register_runner(self) -> str:
        """Register a runner with a fresh id (never reused, never the host's name); its id."""
        runner_id = secrets.token_urlsafe(12)
        self._run(
            lambda c: c.execute(q.REGISTER_RUNNER, (runner_id, socket.gethostname(), os.getpid()))
        )
        return runner_id

    def heartbeat(self, runner_id: str) -> bool:
        """Mark ``runner_id`` alive now (database clock); False if it was reaped meanwhile."""
        return self._run(lambda c: c.execute(q.HEARTBEAT, (runner_id,)).fetchone() is not None)

    def unregister_runner(self, runner_id: str) -> None:
        """Remove ``runner_id`` from the registry (at shutdown)."""
        self._run(lambda c: c.execute(q.UNREGISTER_RUNNER, (runner_id,)))

    def reap(self, runner_timeout: float, *, now: float | None, reason: str = "restart") -> int:
        """Remove runners silent past ``runner_timeout`` and fail every live job no registered
        runner owns (error ``reason``); returns how many jobs.

        One reaper at a time across the cluster: if another holds the reaper's lock, returns 0
        at once. Runners listening are notified of the reaped jobs. ``now`` is the jobs'
        ``updated_at`` (the database clock if None).
        """

        def reap(conn: _Conn) -> int:
            with conn.transaction():
                locked = conn.execute(q.TRY_LOCK_REAPER, (q.LOCK_CLASS, q.LOCK_REAP)).fetchone()
                if not (locked and locked[0]):
                    return 0
                conn.execute(q.DELETE_SILENT_RUNNERS, (runner_timeout,))
                reaped = [row[0] for row in conn.execute(q.REAP_ORPHANED_JOBS, (reason, now))]
                _notify(conn, reaped)
                return len(reaped)

        return self._run(reap)

    def fail_own_jobs(self, reason: str, *, now: float) -> int:
        """Fail this runner's live jobs (``runner_id``'s; no runner: the jobs with no owner)."""
        return self._run(
            lambda c: c.execute(q.FAIL_OWN_JOBS, (reason, now, self.runner_id)).rowcount
        )

    def drain_changes(self, job_ids: Sequence[str]) -> tuple[set[str], set[str]]:
        """Of ``job_ids`` (this runner's drains): ``(cancelled, no longer this runner's)``."""
        rows = self._run(
            lambda c: c.execute(
                q.DRAIN_CHANGES, {"runner": self.runner_id, "ids": list(job_ids)}
            ).fetchall()
        )
        cancelled = {job_id for job_id, is_cancelled, owned in rows if is_cancelled and owned}
        lost = {job_id for job_id, _, owned in rows if not owned}
        return cancelled, lost

    def release_job(self, job_id: str) -> None:
        """This runner's drain of the terminal job ``job_id`` stopped: drop the ownership.

        Runners waiting on the job are notified in the same transaction (a rare write).
        """

        def release(conn: _Conn) -> None:
            with conn.transaction():
                if conn.execute(q.RELEASE_JOB, (job_id, self.runner_id)).rowcount:
                    _notify(conn, [job_id])

        self._run(release)

    def notify_jobs(self, job_ids: Sequence[str]) -> None:
        """Tell the listening runners that ``job_ids`` changed, in a transaction of its own."""
        self._run(lambda c: _notify(c, job_ids))

    def drain_over(self, job_id: str) -> bool:
        """True unless a runner other than this one may still store an outcome of the job."""
        row = self._run(lambda c: c.execute(q.DRAIN_OVER, (self.runner_id, job_id)).fetchone())
        return row is None or bool(row[0])

    # ----------------------------------------------------------------------------------------
    # Creating jobs

    def create_job(
        self,
        caller: str,
        caller_class: str,
        targets: Sequence[Target],
        *,
        ttl: float,
        targets_per_job: int,
        jobs_per_caller: int,
        jobs_total: int,
        now: float,
        status: JobState = JobState.QUEUED,
        job_id: str | None = None,
    ) -> tuple[Job, bool]:
        """As :meth:`trio_batch.Store.create_job`, serialised cluster-wide.

        The reuse lookup, the caps counts and the insert run in one READ COMMITTED transaction
        after ``pg_advisory_xact_lock``: every runner's committed jobs are counted. The new job
        is owned by ``runner_id``.
        """
        new = new_job(caller, caller_class, targets, ttl=ttl, status=status, job_id=job_id, now=now)
        job = new.job

        def create(conn: _Conn) -> tuple[Job, bool]:
            # A reuse needs no lock: look first with a plain read, then again under the lock.
            existing = self._find_reusable(conn, job, now)
            if existing is not None:
                return existing, True
            with conn.transaction():
                conn.execute(q.XACT_LOCK, (q.LOCK_CLASS, q.LOCK_CREATE))
                existing = self._find_reusable(conn, job, now)
                if existing is not None:
                    return existing, True
                if (
                    self.runner_id is not None
                    and conn.execute(q.RUNNER_REGISTERED, (self.runner_id,)).fetchone() is None
                ):
                    # Reaped (its heartbeats were late) and not yet registered again: a job
                    # created now would be owned by a runner the others take for dead.
                    raise StoreUnavailable(
                        "this runner was taken for dead by another (its heartbeats were late) "
                        "and is registering again; the job was not created, submit it again"
                    )
                check_caps(
                    job,
                    targets_per_job=targets_per_job,
                    jobs_per_caller=jobs_per_caller,
                    jobs_total=jobs_total,
                    caller_live=lambda: _count(conn, q.COUNT_LIVE_OF_CALLER, (job.caller,)),
                    total_live=lambda: _count(conn, q.COUNT_LIVE, ()),
                    blocking_job=lambda: _first(conn, q.NEWEST_LIVE_OF_CALLER, (job.caller,)),
                )
                conn.execute(q.RETIRE_LAPSED, (job.caller, job.idem_key, now))
                # A second current job of the key (a writer that skipped the lock) is refused
                # by the unique index: UniqueViolation, so StoreUnavailable, nothing written.
                conn.execute(q.INSERT_JOB, (*new.job_params(), self.runner_id))
                with conn.cursor() as cur:
                    cur.executemany(q.INSERT_TARGET, new.target_params())
            return job, False

        return self._run(create)

    @staticmethod
    def _find_reusable(conn: _Conn, job: Job, now: float) -> Job | None:
        row = conn.execute(q.FIND_REUSABLE, (job.caller, job.idem_key, now)).fetchone()
        return None if row is None else job_from_row(row)

    # ----------------------------------------------------------------------------------------
    # Writing outcomes and statuses

    def record_outcomes(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float
    ) -> list[Job | Exception | None]:
        """Store several outcomes in one transaction (group commit); one answer per write.

        Each write is atomic on its own, in a savepoint, and answers the updated job, None (the
        job is unknown, lapsed, or no longer this runner's: nothing written), or the exception
        that refused it alone (:class:`OutcomeExists`, ValueError). If the commit is cut off by
        a lost connection the writes may have committed: a retry of such a write that finds
        its very outcome stored answers the job instead of :class:`OutcomeExists`, so nothing
        is lost or counted twice.
        """

        def record(conn: _Conn) -> list[Job | Exception | None]:
            answers: list[Job | Exception | None] = []
            with conn.transaction():
                for write in writes:
                    try:
                        answers.append(self._record_one(conn, write, ttl=ttl, now=now))
                    except (OutcomeExists, ValueError) as exc:
                        answers.append(exc)
                    except psycopg.DataError as exc:
                        # The database refused this write's values alone (the savepoint
                        # undid it): a typed answer for it, never the driver's own error.
                        answers.append(StoreError(f"the database refused this outcome: {exc}"))
            return answers

        try:
            answers = self._run(record)
        except psycopg.Error as exc:
            if self._conn is None:  # the connection was lost: the commit may have happened
                self._maybe_committed.update((w.job_id, w.idx) for w in writes)
            raise exc
        for write in writes:
            self._maybe_committed.discard((write.job_id, write.idx))
        return answers

    def _record_one(
        self, conn: _Conn, write: OutcomeWrite, *, ttl: float, now: float
    ) -> Job | None:
        status, result_text, error, hint = write_values(write)
        try:
            with conn.transaction():  # a savepoint: a refused write changes nothing
                row = conn.execute(
                    q.BUMP_JOB,
                    (
                        int(error is not None),
                        0 if result_text is None else len(result_text),
                        now,
                        now + ttl,
                        write.job_id,
                        now,
                        self.runner_id,
                    ),
                ).fetchone()
                if row is None:
                    return None
                job = job_from_row(row)
                if job.targets_done >= job.targets_total and job.status.is_live:
                    final = final_status(job.targets_total, job.targets_failed)
                    conn.execute(q.SET_STATUS, (final.value, write.job_id))
                    job = dataclasses.replace(job, status=final)
                stored = conn.execute(
                    q.STORE_OUTCOME,
                    (
                        status.value,
                        result_text,
                        error,
                        hint,
                        now,
                        write.attempts,
                        write.job_id,
                        write.idx,
                    ),
                ).rowcount
                if stored != 1:
                    if (write.job_id, write.idx) in self._maybe_committed and conn.execute(
                        q.GET_OUTCOME, (write.job_id, write.idx)
                    ).fetchone() == (status.value, result_text, error, hint):
                        raise _AlreadyStored
                    raise OutcomeExists(
                        f"target {write.idx} of job {write.job_id} already has an outcome or "
                        "does not exist"
                    )
        except _AlreadyStored:
            return self._get_job(conn, write.job_id, now)
        return job

    def finish_job(
        self, job_id: str, status: JobState, *, now: float, error: str | None = None
    ) -> Job | None:
        """Move a live, unexpired job to the terminal ``status`` once (from any runner).

        Runners listening are notified of the job in the same transaction (a rare write).
        """
        status = JobState(status)
        if status.is_live:
            raise ValueError(f"finish_job takes a terminal status, not {status}")
        if not is_job_id(job_id):
            return None

        def finish(conn: _Conn) -> Any:
            with conn.transaction():
                row = conn.execute(q.FINISH_JOB, (status.value, error, now, job_id, now)).fetchone()
                if row is not None:
                    _notify(conn, [job_id])  # the runner draining it learns of a cancel now
            return row

        row = self._run(finish)
        return None if row is None else job_from_row(row)

    def purge_expired(self, *, now: float, batch_size: int) -> int:
        """Delete at most ``batch_size`` lapsed jobs (targets by cascade); returns how many.

        Rows another runner is purging at the same moment are skipped, not waited for.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        return self._run(lambda c: c.execute(q.PURGE_LAPSED, (now, batch_size)).rowcount)

    # ----------------------------------------------------------------------------------------
    # Reading

    def get_job(self, job_id: str, *, now: float) -> Job | None:
        """The job, or None if it is unknown, malformed or its lease has lapsed."""
        if not is_job_id(job_id):
            return None
        return self._run(lambda c: self._get_job(c, job_id, now))

    @staticmethod
    def _get_job(conn: _Conn, job_id: str, now: float) -> Job | None:
        row = conn.execute(q.GET_JOB, (job_id, now)).fetchone()
        return None if row is None else job_from_row(row)

    def get_status(self, job_id: str, *, now: float) -> tuple[Job, list[TargetStatus]] | None:
        """The job and its targets in order, from one snapshot; the one due reads ``running``."""
        if not is_job_id(job_id):
            return None

        def read(conn: _Conn) -> tuple[Job, list[TargetStatus]] | None:
            with conn.transaction():
                conn.execute(q.SNAPSHOT)
                job = self._get_job(conn, job_id, now)
                if job is None:
                    return None
                rows = conn.execute(q.GET_TARGETS, (job_id,)).fetchall()
            return job, with_running(job, [target_from_row(row) for row in rows])

        return self._run(read)

    def list_jobs(self, *, now: float, caller: str | None = None, limit: int = 100) -> list[Job]:
        """Unexpired jobs, most recently active first; only ``caller``'s if given."""
        if caller is None:
            rows = self._run(lambda c: c.execute(q.LIST_JOBS, (now, limit)).fetchall())
        else:
            rows = self._run(
                lambda c: c.execute(q.LIST_JOBS_OF_CALLER, (caller, now, limit)).fetchall()
            )
        return [job_from_row(row) for row in rows]

    def counts(self, *, now: float) -> StoreCounts:
        """Unexpired jobs by status (every status present, zeros included), and their targets."""

        def read(conn: _Conn) -> tuple[list[Any], Any]:
            with conn.transaction():
                conn.execute(q.SNAPSHOT)
                by_status = conn.execute(q.COUNT_BY_STATUS, (now,)).fetchall()
                sums = conn.execute(q.SUM_TARGETS, (now,)).fetchone()
            return by_status, sums

        by_status, (total, done, failed, abandoned) = self._run(read)
        jobs = dict.fromkeys((str(s) for s in JobState), 0)
        jobs.update((str(status), int(count)) for status, count in by_status)
        return StoreCounts(jobs, int(total), int(done), int(failed), int(abandoned))

    def forget_job(self, job_id: str, *, caller: str | None = None, now: float) -> Job | None:
        """Delete a terminal job and its targets in one transaction; see ``JobStore``."""
        if not is_job_id(job_id):
            return None

        def forget(conn: _Conn) -> Job | None:
            with conn.transaction():
                row = conn.execute(q.GET_JOB_FOR_UPDATE, (job_id, now)).fetchone()
                job = None if row is None else job_from_row(row)
                if job is None or (caller is not None and job.caller != caller):
                    return None
                if job.status.is_live:
                    raise JobLive(f"job {job_id} is {job.status}; cancel it first, then forget it")
                conn.execute(q.FORGET_JOB, (job_id,))
            return job

        return self._run(forget)

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
        found = self._with_job(
            job_id, now, lambda c: c.execute(q.GET_ONE_TARGET, (job_id, idx)).fetchone()
        )
        if found is None:
            return None
        job, row = found
        if row is None:
            return None
        return job, with_running(job, [target_from_row(row)])[0]

    def list_caller_jobs(
        self, caller: str, *, now: float, limit: int, before: tuple[float, str] | None = None
    ) -> list[Job]:
        """One page of ``caller``'s unexpired jobs, newest first; see ``JobStore``."""
        sql = q.LIST_CALLER_JOBS if before is None else q.LIST_CALLER_JOBS_BEFORE
        params: tuple[Any, ...] = (
            (caller, now, limit) if before is None else (caller, now, *before, limit)
        )
        return [job_from_row(row) for row in self._run(lambda c: c.execute(sql, params).fetchall())]

    def _with_job(
        self, job_id: str, now: float, read: Callable[[_Conn], T]
    ) -> tuple[Job, T] | None:
        """The unexpired job and what ``read`` reads, from one snapshot; None without the job."""
        if not is_job_id(job_id):
            return None

        def both(conn: _Conn) -> tuple[Job, T] | None:
            with conn.transaction():
                conn.execute(q.SNAPSHOT)
                job = self._get_job(conn, job_id, now)
                return None if job is None else (job, read(conn))

        return self._run(both)

    # ----------------------------------------------------------------------------------------

    def _run(self, fn: Callable[[_Conn], T]) -> T:
        """``fn(connection)``; a psycopg error that means the connection is gone drops it, so
        the next call reconnects."""
        try:
            return fn(self.connection())
        except psycopg.Error as exc:
            self._forget_if_lost(exc)
            raise


def _notify(conn: _Conn, job_ids: Sequence[str]) -> None:
    """Notify the listening runners of ``job_ids`` (at the commit of the current transaction)."""
    if job_ids:
        conn.execute(q.NOTIFY_JOBS, (q.CHANNEL, list(job_ids)))


def _count(conn: _Conn, sql: str, params: tuple[Any, ...]) -> int:
    row = conn.execute(sql, params).fetchone()
    return 0 if row is None else int(row[0])


def _first(conn: _Conn, sql: str, params: tuple[Any, ...]) -> str | None:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else str(row[0])
