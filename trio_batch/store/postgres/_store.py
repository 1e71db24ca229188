"""The PostgreSQL store's operations: jobs, targets, leases, caps, and the runners' registry.

Plain and synchronous (psycopg 3's sync API): nothing here knows about trio. One
:class:`PostgresStore` owns one connection and is used from one thread at a time (its store
thread); :class:`~trio_batch.store.postgres.PostgresJobStore` puts the async face on it.

Every state change is one transaction at READ COMMITTED (explicit, or a submit's one statement,
the function `trio_batch_create_job`: :mod:`._create_queries`). The connection, its
timeouts and reconnecting are in :mod:`._connection`; the reads in :mod:`._reads`, the
outcome writes in :mod:`._outcomes`.

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

import functools
import os
import secrets
import socket
from collections.abc import Sequence
from typing import Any, TypeVar

from ..._errors import StoreUnavailable
from ..._event import new_event_id
from ..._model import (
    Job,
    JobState,
    Target,
    TargetState,
    is_job_id,
)
from .._new_job import JobInsert, check_counted_caps, new_job
from .._protocol import Admission, NewJob, ReapedJob
from .._rows import dumps, job_from_row, options_from_text
from . import _create_queries as cq
from . import _host_queries as hq
from . import _outbox_queries as oq
from . import _outcome_queries as wq
from . import _queries as q
from ._connection import Conn, Op
from ._outcomes import PostgresOutcomes

__all__ = ["PostgresStore"]

T = TypeVar("T")
#: The submit function's caps are integer arguments: one past it is bound as the largest,
#: which no count reaches (Config takes any int; out of range refused every submit).
_MAX_CAP = 2**31 - 1


class PostgresStore(PostgresOutcomes):
    """Jobs and targets in one PostgreSQL database, over one connection.

    Open one with :meth:`open`. A lost connection is reopened at the next call. Reads, and
    transactions refused at their ``BEGIN`` by a server going down, are retried once on a
    fresh connection; any other operation cut off by a lost connection raises (it may have
    committed), and the caller's retry is safe, as each operation says. ``runner_id`` is the
    runner this connection writes for (None: no runner; its jobs have no owner).
    """

    # ----------------------------------------------------------------------------------------
    # Runners

    def register_runner(self) -> str:
        """Register a runner with a fresh id (never reused, never the host's name); its id.

        A retry after a lost connection registers another id; one registered by a lost attempt
        is reaped as silent."""
        runner_id = secrets.token_urlsafe(12)
        values = (runner_id, socket.gethostname(), os.getpid())
        self._run(lambda c: self._one(c, Op.WRITE, q.REGISTER_RUNNER, values))
        return runner_id

    def heartbeat(self, runner_id: str) -> bool:
        """Mark ``runner_id`` alive now (database clock); False if it was reaped meanwhile.
        Idempotent: safe to retry."""
        return self._run(
            lambda c: self._one(c, Op.WRITE, q.HEARTBEAT, (runner_id,)).fetchone() is not None
        )

    def unregister_runner(self, runner_id: str) -> None:
        """Remove ``runner_id`` from the registry (at shutdown), telling the listening
        runners it is gone: waits on its jobs read them again. Idempotent."""
        self._run(lambda c: self._one(c, Op.WRITE, q.UNREGISTER_RUNNER, (runner_id,)))

    def reap(
        self, runner_timeout: float, *, now: float | None, reason: str = "restart"
    ) -> list[ReapedJob]:
        """Remove runners silent past ``runner_timeout`` and fail every live job no registered
        runner owns (error ``reason``); returns those jobs with their trace contexts.

        One reaper at a time across the cluster: if another holds the reaper's lock, returns
        none at once. The listening runners are told of the runners removed, and of the jobs
        failed that one waits on (``RECORD_OUTCOMES``'s rule). ``now`` is the jobs'
        ``updated_at`` (the database clock if None). One transaction: a reap cut off (the
        database killed mid-way) either committed whole or left nothing, and the next reap
        (every heartbeat) does it again.
        """

        def reap(conn: Conn) -> list[ReapedJob]:
            with self._tx(conn, Op.WRITE):
                locked = conn.execute(q.TRY_LOCK_REAPER, (q.LOCK_CLASS, q.LOCK_REAP)).fetchone()
                if not (locked and locked[0]):
                    return []
                conn.execute(q.DELETE_SILENT_RUNNERS, (runner_timeout,))
                rows = conn.execute(q.REAP_ORPHANED_JOBS, (reason, now)).fetchall()
                reaped = [ReapedJob(row[0], row[1]) for row in rows]
                _emit(conn, [job.job_id for job in reaped], now)
                return reaped

        reaped = self._run(reap)
        if reaped:
            self._recount_finished()
        return reaped

    def fail_own_jobs(self, reason: str, *, now: float) -> int:
        """Fail this runner's live jobs (``runner_id``'s; no runner: the jobs with no owner),
        drop them (its drains have stopped) telling their waiters elsewhere, and write their
        terminal events, in one transaction. Idempotent (a retry finds them failed already)."""

        def fail(conn: Conn) -> int:
            with self._tx(conn, Op.WRITE):
                rows = conn.execute(q.FAIL_OWN_JOBS, (reason, now, self.runner_id)).fetchall()
                failed = [row[0] for row in rows]
                _emit(conn, failed, now)
                return len(failed)

        count = self._run(fail)
        if count:
            self._recount_finished()
        return count

    def drain_changes(self, job_ids: Sequence[str]) -> tuple[set[str], set[str]]:
        """Of ``job_ids`` (this runner's drains): ``(cancelled, no longer this runner's)``."""
        values = {"runner": self.runner_id, "ids": list(job_ids)}
        rows = self._run(
            lambda c: self._one(c, Op.READ, q.DRAIN_CHANGES, values).fetchall(), op=Op.READ
        )
        cancelled = {job_id for job_id, is_cancelled, owned in rows if is_cancelled and owned}
        lost = {job_id for job_id, _, owned in rows if not owned}
        return cancelled, lost

    def undrained_jobs(
        self, draining: Sequence[str], *, now: float, limit: int
    ) -> list[tuple[Job, tuple[Target, ...]]]:
        """As :meth:`trio_batch.store.ClusterStore.undrained_jobs`: this runner's live jobs with no
        outcome that are none of ``draining``, each with its targets (two reads)."""

        def read(conn: Conn) -> tuple[list[Any], list[Any]]:
            values = {"runner": self.runner_id, "ids": list(draining), "now": now, "limit": limit}
            jobs = self._one(conn, Op.READ, q.UNDRAINED_JOBS, values).fetchall()
            if not jobs:
                return jobs, []
            ids = [row[0] for row in jobs]
            return jobs, self._one(conn, Op.READ, q.UNDRAINED_TARGETS, (ids,)).fetchall()

        jobs, targets = self._run(read, op=Op.READ)
        of_job: dict[str, list[Target]] = {row[0]: [] for row in jobs}
        for job_id, url, options, custom_id in targets:
            of_job[job_id].append(Target(url, options_from_text(options), custom_id))
        return [(job_from_row(row), tuple(of_job[row[0]])) for row in jobs]

    def release_job(self, job_id: str) -> None:
        """This runner's drain of the terminal job ``job_id`` stopped: drop the ownership.

        Runners waiting on the job are told in the same statement (a rare write).
        Idempotent: a retry finds the job released.
        """
        values = (job_id, self.runner_id)
        self._run(lambda c: self._one(c, Op.WRITE, q.RELEASE_JOB, values))

    def watch_job(self, job_id: str) -> bool:
        """Mark the job as waited on, so the outcome that ends it notifies the listening
        runners (``RECORD_OUTCOMES``); False if every outcome of the job is stored (or it is
        unknown): it may have ended before the mark, so read it again. Idempotent."""
        row = self._run(lambda c: self._one(c, Op.WRITE, q.WATCH_JOB, {"id": job_id}).fetchone())
        return bool(row and row[0])

    def notify_jobs(self, job_ids: Sequence[str]) -> None:
        """Tell the listening runners that ``job_ids`` changed, in a transaction of its own
        (a retry notifies twice: harmless, a notification only wakes a read)."""
        if job_ids:
            values = (q.CHANNEL, list(job_ids))
            self._run(lambda c: self._one(c, Op.WRITE, q.NOTIFY_JOBS, values))

    def drain_over(self, job_id: str) -> bool:
        """True unless a runner other than this one may still store an outcome of the job;
        False for a job not found (forgotten since the caller read it: read it again)."""
        values = (self.runner_id, job_id)
        row = self._run(
            lambda c: self._one(c, Op.READ, q.DRAIN_OVER, values).fetchone(), op=Op.READ
        )
        return row is not None and bool(row[0])

    # ----------------------------------------------------------------------------------------
    # Creating jobs

    def create_job(self, new: NewJob, *, now: float) -> tuple[Job, bool]:
        """As :meth:`trio_batch.Store.create_job`, serialised cluster-wide, in one statement
        (the function ``trio_batch_create_job``, :mod:`._create_queries`).

        The creation lock is tried first: free, it is taken and ``ADMISSION`` read once under
        it. Held by another, a reuse or a refusal is answered from one plain read, not queued
        behind it; otherwise the same read again, the runner's registration and the insert
        follow ``pg_advisory_xact_lock``. Each read under the lock is at READ COMMITTED once it
        is granted: every runner's committed jobs are counted. The new job is owned by
        ``runner_id``. If the connection is lost during the call the job may exist: submitting
        the same targets again is safe (the reuse lookup finds it).
        """
        insert = new_job(new, now=now)
        job = insert.job
        values = (
            *insert.job_params(),
            self.runner_id,
            *_target_values(insert),
            *_label_values(job),
            *_outbox_values(new),
            now,
            min(new.targets_per_job, _MAX_CAP),
            min(new.jobs_per_caller, _MAX_CAP),
            min(new.jobs_total, _MAX_CAP),
        )
        row = self._run(lambda c: self._one(c, Op.WRITE, cq.CREATE_JOB, values).fetchone())
        assert row is not None  # one row, always
        created, registered = row[0], row[1]
        if created:
            return job, False
        reusable = admitted(new.admission(job), row[cq.CREATE_JOB_ADMISSION_AT :])
        if reusable is not None:
            return reusable, True
        if registered is not False:  # pragma: no cover - the function and check_caps disagree
            raise AssertionError(f"the submit was refused on no cap: {row}")
        # Reaped (its heartbeats were late) and not yet registered again: a job created now
        # would be owned by a runner the others take for dead.
        raise StoreUnavailable(
            "this runner was taken for dead by another (its heartbeats were late) "
            "and is registering again; the job was not created, submit it again"
        )

    # ----------------------------------------------------------------------------------------
    # Writing outcomes and statuses

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

        def finish(conn: Conn) -> Any:
            with self._tx(conn, Op.WRITE):
                row = conn.execute(
                    wq.FINISH_JOB, (status.value, error, now, job_id, now)
                ).fetchone()
                if row is not None:
                    _emit(conn, [job_id], now)
                    _notify(conn, [job_id])  # the runner draining it learns of a cancel now
            return row

        row = self._run(finish)
        if row is None:
            return None
        job = job_from_row(row)
        self._count_finished(job)
        return job

    def purge_expired(self, *, now: float, batch_size: int) -> int:
        """Delete at most ``batch_size`` lapsed jobs (targets by cascade); returns how many.

        Also drops the per-host limits' lapsed slots and the hosts with no pause or rate left.

        Rows another runner is purging at the same moment are skipped, not waited for.
        Idempotent: a retry deletes the next batch.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        values = {"now": now, "limit": batch_size}
        count = self._run(lambda c: self._one(c, Op.WRITE, q.PURGE_LAPSED, values).rowcount)
        if count:
            self._recount_finished()
        for sweep in hq.HOST_SWEEP:  # the per-host limits' rows left by dead or idle runners
            self._run(functools.partial(self._sweep, sweep))
        return count

    def _sweep(self, sql: str, conn: Conn) -> None:
        self._one(conn, Op.WRITE, sql)


def _notify(conn: Conn, job_ids: Sequence[str]) -> None:
    """Notify the listening runners of ``job_ids`` (at the commit of the current transaction)."""
    if job_ids:
        conn.execute(q.NOTIFY_JOBS, (q.CHANNEL, list(job_ids)))


def _emit(conn: Conn, job_ids: Sequence[str], now: float | None) -> None:
    """Write the terminal events of ``job_ids`` (just made terminal) into the outbox, in the
    current transaction. ``now`` None: the database's clock."""
    if job_ids:
        conn.execute(oq.EMIT_EVENTS, {"now": now, "ids": list(job_ids)})


def _target_values(insert: JobInsert) -> tuple[str, str, str | None, str | None]:
    """The new job's targets as the submit's function takes them: their status, then their
    URLs, options and custom ids as JSON arrays; plain targets as their URLs alone (NULLs)."""
    plain = insert.plain_urls()
    if plain is not None:
        return TargetState.PENDING.value, dumps(plain), None, None
    _, status, urls, options, custom_ids = insert.target_columns()
    return status, dumps(urls), dumps(options), dumps(custom_ids)


def _label_values(job: Job) -> tuple[list[str] | None, list[str] | None]:
    """The new job's labels as the submit's function takes them: keys and values as arrays,
    NULLs for none (most jobs: an empty array costs a dump all the same)."""
    if not job.metadata:
        return None, None
    return list(job.metadata), list(job.metadata.values())


def _outbox_values(new: NewJob) -> tuple[str | None, str | None, bool]:
    """The new job's outbox row as the submit's function takes it: a fresh event id (None:
    no row, the job tells nobody of its end), the webhook's URL, whether to call back."""
    if new.webhook_url is None and not new.callback:
        return None, None, False
    return new_event_id(), new.webhook_url, new.callback


def admitted(want: Admission, row: tuple[Any, ...]) -> Job | None:
    """What an ``ADMISSION`` row answers for ``want``: the job to reuse, or None if a job may
    be created; raises the cap it would break."""
    n = q.ADMISSION_JOB_COLUMNS
    if row[0] is not None:
        return job_from_row(row[:n])
    check_counted_caps(want, row[n], row[n + 1], row[n + 2])
    return None
