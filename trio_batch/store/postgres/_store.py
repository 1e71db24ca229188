"""The PostgreSQL store's operations: jobs, targets, leases, caps, and the runners' registry.

Plain and synchronous (psycopg 3's sync API): nothing here knows about trio. One
:class:`PostgresStore` owns one connection and is used from one thread at a time (its store
thread); :class:`~trio_batch.store.postgres.PostgresJobStore` puts the async face on it.

Every state change is one explicit transaction at READ COMMITTED. The connection, its
timeouts and reconnecting are in :mod:`._connection`; the reads in :mod:`._reads`.

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

import contextlib
import functools
import os
import secrets
import socket
from collections.abc import Sequence
from typing import Any, TypeVar

import psycopg

from ..._errors import OutcomeExists, StoreError, StoreUnavailable
from ..._event import new_event_id
from ..._model import (
    Job,
    JobState,
    OutcomeWrite,
    is_job_id,
)
from .._protocol import NewJob, ReapedJob
from .._rows import check_caps, job_from_row, new_job, write_values
from . import _queries as q
from ._connection import Conn, Op, rollback
from ._reads import PostgresReads

__all__ = ["PostgresStore"]

#: The statuses the last outcome of a job gives it.
_FINAL_STATUSES = frozenset({JobState.DONE, JobState.FAILED, JobState.PARTIAL})

T = TypeVar("T")


#: psycopg's pipeline mode needs libpq 14 or newer (psycopg[binary] ships one).
_PIPELINE_SUPPORTED = psycopg.Pipeline.is_supported()


def _outcome_answer(write: OutcomeWrite, row: Any) -> Job | OutcomeExists | None:
    """What ``RECORD_OUTCOME``'s one row says of ``write``: the job it bumped, None (the job is
    unknown, lapsed or not this runner's), or OutcomeExists (the target was not pending)."""
    assert row is not None  # the statement always answers one row
    owned, *job_row = row
    if job_row[0] is not None:
        return job_from_row(job_row)
    if not owned:
        return None
    return OutcomeExists(
        f"target {write.idx} of job {write.job_id} already has an outcome or does not exist"
    )


class _Refused(Exception):
    """The database refused one write's values, aborting the transaction: make it again
    without that write (``index`` in the batch)."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class PostgresStore(PostgresReads):
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
        """Remove ``runner_id`` from the registry (at shutdown). Idempotent."""
        self._run(lambda c: self._one(c, Op.WRITE, q.UNREGISTER_RUNNER, (runner_id,)))

    def reap(
        self, runner_timeout: float, *, now: float | None, reason: str = "restart"
    ) -> list[ReapedJob]:
        """Remove runners silent past ``runner_timeout`` and fail every live job no registered
        runner owns (error ``reason``); returns those jobs with their trace contexts.

        One reaper at a time across the cluster: if another holds the reaper's lock, returns
        none at once. Runners listening are notified of the reaped jobs. ``now`` is the jobs'
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
                ids = [job.job_id for job in reaped]
                _emit(conn, ids, now)
                _notify(conn, ids)
                return reaped

        reaped = self._run(reap)
        if reaped:
            self._recount_finished()
        return reaped

    def fail_own_jobs(self, reason: str, *, now: float) -> int:
        """Fail this runner's live jobs (``runner_id``'s; no runner: the jobs with no owner),
        and write their terminal events, in one transaction. Idempotent (a retry finds them
        failed already)."""

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

    def release_job(self, job_id: str) -> None:
        """This runner's drain of the terminal job ``job_id`` stopped: drop the ownership.

        Runners waiting on the job are notified in the same transaction (a rare write).
        Idempotent: a retry finds the job released.
        """

        def release(conn: Conn) -> None:
            with self._tx(conn, Op.WRITE):
                if conn.execute(q.RELEASE_JOB, (job_id, self.runner_id)).rowcount:
                    _notify(conn, [job_id])

        self._run(release)

    def notify_jobs(self, job_ids: Sequence[str]) -> None:
        """Tell the listening runners that ``job_ids`` changed, in a transaction of its own
        (a retry notifies twice: harmless, a notification only wakes a read)."""
        if job_ids:
            values = (q.CHANNEL, list(job_ids))
            self._run(lambda c: self._one(c, Op.WRITE, q.NOTIFY_JOBS, values))

    def drain_over(self, job_id: str) -> bool:
        """True unless a runner other than this one may still store an outcome of the job."""
        values = (self.runner_id, job_id)
        row = self._run(
            lambda c: self._one(c, Op.READ, q.DRAIN_OVER, values).fetchone(), op=Op.READ
        )
        return row is None or bool(row[0])

    # ----------------------------------------------------------------------------------------
    # Creating jobs

    def create_job(self, new: NewJob, *, now: float) -> tuple[Job, bool]:
        """As :meth:`trio_batch.Store.create_job`, serialised cluster-wide.

        A reuse or a refusal is answered from one plain read (``ADMISSION``), no lock taken.
        Otherwise the reuse lookup, the caps counts and the insert run in one READ COMMITTED
        transaction after ``pg_advisory_xact_lock``: every runner's committed jobs are counted.
        The new job is owned by ``runner_id``. If the connection is lost during the commit the
        job may exist: submitting the same targets again is safe (the reuse lookup finds it).
        """
        insert = new_job(new, now=now)
        job = insert.job

        def create(conn: Conn) -> tuple[Job, bool]:
            # A reuse or a refusal needs no lock: both were true in the snapshot of one plain
            # read. Only a job that may be created takes the lock, and reads again under it.
            reusable = self._admit_from_snapshot(conn, job, new, now)
            if reusable is not None:
                return reusable, True
            with self._tx(conn, Op.WRITE):
                # Under the lock, in one round trip: the reuse lookup again, this runner's
                # registration and the caps' counts, each read once the lock is granted.
                with _pipeline(conn):
                    conn.execute(q.XACT_LOCK, (q.LOCK_CLASS, q.LOCK_CREATE))
                    found = conn.execute(q.FIND_REUSABLE, (job.caller, job.idem_key, now))
                    registered = (
                        None
                        if self.runner_id is None
                        else conn.execute(q.RUNNER_REGISTERED, (self.runner_id,))
                    )
                    of_caller = conn.execute(q.COUNT_LIVE_OF_CALLER, (job.caller,))
                    in_all = conn.execute(q.COUNT_LIVE)
                existing = found.fetchone()
                if existing is not None:
                    return job_from_row(existing), True
                if registered is not None and registered.fetchone() is None:
                    # Reaped (its heartbeats were late) and not yet registered again: a job
                    # created now would be owned by a runner the others take for dead.
                    raise StoreUnavailable(
                        "this runner was taken for dead by another (its heartbeats were late) "
                        "and is registering again; the job was not created, submit it again"
                    )
                check_caps(
                    job,
                    new,
                    caller_live=lambda: _counted(of_caller),
                    total_live=lambda: _counted(in_all),
                    blocking_job=lambda: _first(conn, q.NEWEST_LIVE_OF_CALLER, (job.caller,)),
                )
                with _pipeline(conn):  # the writes together, answered by COMMIT's round trip
                    conn.execute(q.RETIRE_LAPSED, (job.caller, job.idem_key, now))
                    # A second current job of the key (a writer that skipped the lock) is
                    # refused by the unique index: UniqueViolation, so StoreUnavailable.
                    conn.execute(q.INSERT_JOB, (*insert.job_params(), self.runner_id))
                    conn.execute(q.INSERT_TARGETS, insert.target_columns())
                    if job.metadata:
                        with conn.cursor() as cur:
                            cur.executemany(q.INSERT_LABEL, insert.label_params())
                    if new.webhook_url is not None or new.callback:
                        outbox_row = (job.id, new_event_id(), new.webhook_url, new.callback)
                        conn.execute(q.INSERT_OUTBOX, outbox_row)
            return job, False

        return self._run(create)

    def _admit_from_snapshot(self, conn: Conn, job: Job, new: NewJob, now: float) -> Job | None:
        """The job to reuse, or the cap ``new`` breaks raised, as one read of ``ADMISSION``
        shows them (no lock taken); None if ``job`` may be created.

        Under load most submits are refused: each one taking the cluster-wide creation lock
        queued every runner's submits behind the refusals.
        """
        params = {"caller": job.caller, "key": job.idem_key, "now": now}
        row = self._one(conn, Op.READ, q.ADMISSION, params).fetchone()
        assert row is not None  # one row, whatever the table holds
        n = q.ADMISSION_JOB_COLUMNS
        if row[0] is not None:
            return job_from_row(row[:n])
        caller_live, total_live, newest = row[n], row[n + 1], row[n + 2]
        check_caps(
            job,
            new,
            caller_live=lambda: int(caller_live),
            total_live=lambda: int(total_live),
            blocking_job=lambda: None if newest is None else str(newest),
        )
        return None

    # ----------------------------------------------------------------------------------------
    # Writing outcomes and statuses

    def record_outcomes(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float
    ) -> list[Job | Exception | None]:
        """Store several outcomes in one transaction (group commit); one answer per write.

        Each write is one statement (``RECORD_OUTCOME``), atomic on its own, and answers the
        updated job, None (the job is unknown, lapsed, or no longer this runner's: nothing
        written), or the exception that refused it alone (:class:`OutcomeExists`, ValueError,
        :class:`StoreError` for values the database refused). A refused write changes nothing,
        so the writes need no savepoints; a write whose values the database refuses aborts the
        transaction, which is then made again without it. Several writes go out in psycopg's
        pipeline mode, together, instead of each waiting for the answer to the one before; a
        refused value there sends the batch again one write at a time, to tell which it was.
        A single write runs in autocommit, its own transaction. If the commit is cut off by a
        lost connection the writes may have committed: a retry of such a write (sent one at a
        time) that finds its very outcome stored answers the job instead of
        :class:`OutcomeExists`, so nothing is lost or counted twice.
        """
        answers: list[Job | Exception | None] = [None] * len(writes)
        todo = list(range(len(writes)))

        def pipelined(conn: Conn) -> None:
            try:
                answers[:] = self._record_pipelined(conn, writes, ttl, now)
                todo.clear()
            except psycopg.DataError:
                pass  # rolled back: one write at a time below, to tell which was refused

        def record(conn: Conn) -> None:
            alone = len(todo) == 1  # one statement: a transaction of its own
            with contextlib.nullcontext() if alone else self._tx(conn, Op.WRITE):
                for i in todo:
                    try:
                        answers[i] = self._record_one(conn, writes[i], ttl, now, alone=alone)
                    except ValueError as exc:  # refused before any SQL: nothing sent
                        answers[i] = exc
                    except psycopg.DataError as exc:
                        # The database refused this write's values alone, and with them the
                        # transaction: a typed answer for it, and the others made again.
                        answers[i] = StoreError(f"the database refused this outcome: {exc}")
                        raise _Refused(i) from exc

        try:
            if self._can_pipeline(writes):
                self._run(pipelined)
            while todo:
                try:
                    self._run(record)
                    break
                except _Refused as refused:  # rolled back: again without the refused write
                    todo.remove(refused.index)
        except psycopg.Error as exc:
            if self._conn is None:  # the connection was lost: the commit may have happened
                self._maybe_committed.update((w.job_id, w.idx) for w in writes)
            raise exc
        for write in writes:
            self._maybe_committed.discard((write.job_id, write.idx))
        for answer in answers:
            # The write that stores a job's last outcome sets its final status (a cancelled
            # job was terminal before).
            if (
                isinstance(answer, Job)
                and answer.status in _FINAL_STATUSES
                and answer.targets_done >= answer.targets_total
            ):
                self._count_finished(answer)
        return answers

    def _can_pipeline(self, writes: Sequence[OutcomeWrite]) -> bool:
        """Whether ``writes`` can go to the server in one pipeline: several of them, and none
        a retry in doubt (whose answer may need its stored outcome read, one at a time)."""
        return (
            len(writes) > 1
            and _PIPELINE_SUPPORTED
            and not any((w.job_id, w.idx) in self._maybe_committed for w in writes)
        )

    def _record_pipelined(
        self, conn: Conn, writes: Sequence[OutcomeWrite], ttl: float, now: float
    ) -> list[Job | Exception | None]:
        """Several writes in one transaction, sent in psycopg's pipeline mode with its
        ``BEGIN``, bounds and ``COMMIT``: all go out together and their answers are read
        after, so the batch costs one round trip (the pipeline's closing Sync one more)
        whatever its size. Raises ``psycopg.DataError``, the transaction rolled back, if the
        database refused a write's values (the server then skips what follows, ``COMMIT``
        included), from a fetch or from a later statement's send (psycopg reads the answers
        that have come whenever it sends): which write it was is not known here.
        """
        answers: list[Job | Exception | None] = [None] * len(writes)
        refused: psycopg.DataError | None = None
        try:
            with conn.pipeline() as pipeline:
                try:
                    self._begin_pipelined(conn, Op.WRITE)
                    sent: list[tuple[int, OutcomeWrite, psycopg.Cursor[Any]]] = []
                    for i, write in enumerate(writes):
                        try:
                            values = self._outcome_values(write, ttl=ttl, now=now)
                        except ValueError as exc:  # refused before any SQL: nothing sent
                            answers[i] = exc
                            continue
                        sent.append((i, write, conn.execute(self._outcome_sql, values)))
                    conn.execute("COMMIT", prepare=False)
                    for i, write, cursor in sent:
                        answers[i] = _outcome_answer(write, cursor.fetchone())
                except psycopg.DataError as exc:
                    refused = exc
                    # Read what the aborted pipeline still owes here: left to the block's
                    # end, psycopg would log its "pipeline aborted" as a warning, for a
                    # refusal the caller handles.
                    with contextlib.suppress(psycopg.errors.PipelineAborted):
                        pipeline.sync()
        except BaseException:
            rollback(conn)
            raise
        if refused is not None:
            rollback(conn)
            raise refused
        return answers

    @property
    def _outcome_sql(self) -> str:
        """``RECORD_OUTCOME``, prepared on a direct connection; through a pooler (nothing
        prepared), the function that keeps its plan on the server."""
        return q.RECORD_OUTCOME_CALL if self.pooled else q.RECORD_OUTCOME

    def _outcome_values(self, write: OutcomeWrite, *, ttl: float, now: float) -> dict[str, Any]:
        """``RECORD_OUTCOME``'s parameters for ``write``; ValueError for a write that cannot
        be stored (see :func:`write_values`)."""
        status, result_text, error, hint = write_values(write)
        return {
            "job_id": write.job_id,
            "idx": write.idx,
            "now": now,
            "expires": now + ttl,
            "runner": self.runner_id,
            "status": status.value,
            "result": result_text,
            "error": error,
            "hint": hint,
            "attempts": write.attempts,
            "failed": int(error is not None),
            "size": 0 if result_text is None else len(result_text),
        }

    def _record_one(
        self, conn: Conn, write: OutcomeWrite, ttl: float, now: float, *, alone: bool
    ) -> Job | OutcomeExists | None:
        """One write, one statement: the job, None (not this runner's), or OutcomeExists.
        ``alone``: the write is a transaction of its own (else one is open on ``conn``)."""
        values = self._outcome_values(write, ttl=ttl, now=now)
        if alone:
            row = self._one(conn, Op.WRITE, self._outcome_sql, values).fetchone()
        else:
            row = conn.execute(self._outcome_sql, values).fetchone()
        answer = _outcome_answer(write, row)
        if not (
            isinstance(answer, OutcomeExists) and (write.job_id, write.idx) in self._maybe_committed
        ):
            return answer
        key = (write.job_id, write.idx)
        if alone:
            stored = self._one(conn, Op.READ, q.GET_OUTCOME, key).fetchone()
        else:
            stored = conn.execute(q.GET_OUTCOME, key).fetchone()
        if stored != (values["status"], values["result"], values["error"], values["hint"]):
            return answer
        # The first attempt of this retried write committed before its answer was lost.
        if alone:
            job_row = self._one(conn, Op.READ, q.GET_JOB, (write.job_id, now)).fetchone()
            return None if job_row is None else job_from_row(job_row)
        return self._get_job(conn, write.job_id, now)

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
                row = conn.execute(q.FINISH_JOB, (status.value, error, now, job_id, now)).fetchone()
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
        values = (now, batch_size)
        count = self._run(lambda c: self._one(c, Op.WRITE, q.PURGE_LAPSED, values).rowcount)
        if count:
            self._recount_finished()
        for sweep in q.HOST_SWEEP:  # the per-host limits' rows left by dead or idle runners
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
        conn.execute(q.EMIT_EVENTS, {"now": now, "ids": list(job_ids)})


def _pipeline(conn: Conn) -> contextlib.AbstractContextManager[object]:
    """psycopg's pipeline mode, where libpq has it (14 and newer), else statements one by one:
    the same code either way, as a cursor's answer is read after the block."""
    return conn.pipeline() if _PIPELINE_SUPPORTED else contextlib.nullcontext()


def _counted(cursor: psycopg.Cursor[Any]) -> int:
    row = cursor.fetchone()
    return 0 if row is None else int(row[0])


def _first(conn: Conn, sql: str, params: tuple[Any, ...]) -> str | None:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else str(row[0])
