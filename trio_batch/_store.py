"""The SQLite store: jobs, their targets, leases and caps.

Plain and synchronous: nothing here knows about trio, HTTP or fetching. The runner calls it from
a dedicated store thread so that the event loop never waits on SQLite.

Concurrency model
-----------------
A :class:`Store` owns **one** connection, opened with ``check_same_thread=False``, and a
re-entrant lock. Every public method takes the lock for its whole duration, so a ``Store`` may be
called from any thread (one call at a time runs; the others wait for the lock). Several
processes, or several ``Store`` objects on the same file, coordinate through SQLite's own file
locks: every read-then-write runs under ``BEGIN IMMEDIATE``, which waits up to the busy timeout
for the write lock instead of failing half-way.

Time
----
Times are Unix epoch seconds stored as ``REAL`` (what ``time.time()`` returns): the runner's
injected clock produces them directly, lease comparisons are plain numeric comparisons an index
can serve, and anyone reading the tables can convert with ``datetime(expires_at, 'unixepoch')``.
Every method that needs the time takes ``now=``; it defaults to ``time.time()``.

Durability
----------
File databases use WAL. With ``synchronous="NORMAL"`` (the default) a committed transaction is
never lost when the *process* crashes, but the last commits may be lost on power loss or an OS
crash; ``synchronous="FULL"`` is the power-safe choice, at several times the cost per commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from ._model import (
    Busy,
    CallerBusy,
    Job,
    JobState,
    Options,
    Result,
    SchemaVersionError,
    StoreError,
    Target,
    TargetState,
    TargetStatus,
    TooManyTargets,
    check_caller,
    check_targets,
    idem_key,
)

__all__ = ["SCHEMA_VERSION", "OutcomeExists", "OutcomeWrite", "Store", "WouldBlock"]

#: The schema version this code writes, kept in ``PRAGMA user_version``.
SCHEMA_VERSION = 1

#: Bytes the WAL file is cut back to whenever a checkpoint restarts it.
WAL_SIZE_LIMIT = 16 * 1024 * 1024

#: Job ids are ``secrets.token_urlsafe(16)``: 128 random bits in 22 URL-safe characters.
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{22}")

_LIVE = (JobState.QUEUED.value, JobState.RUNNING.value)

# Column order matches the Job dataclass, so a row maps to Job(*row).
_JOB_COLUMNS = (
    "id, status, error, targets_total, targets_done, targets_failed, caller, caller_class, "
    "idem_key, created_at, updated_at, expires_at"
)
_TARGET_COLUMNS = "idx, url, status, result, error, hint, options, finished_at"


class WouldBlock(Exception):
    """A call declined to run here because it would be slow (internal to the runner).

    Raised before anything is written; the caller runs the call again on the store thread.
    """


@dataclass(frozen=True, slots=True)
class OutcomeWrite:
    """One target outcome for :meth:`Store.record_outcomes`; see :meth:`Store.record_outcome`."""

    job_id: str
    idx: int
    result: Result | None = None
    error: str | None = None
    hint: str | None = None


class OutcomeExists(StoreError):
    """The target already has an outcome (or does not exist); outcomes are never overwritten.

    HTTP 409.
    """

    http_status = 409


def _job(row: Sequence[Any]) -> Job:
    return Job(row[0], JobState(row[1]), *row[2:])


def _target(row: Sequence[Any]) -> TargetStatus:
    idx, url, status, result, error, hint, options, finished_at = row
    return TargetStatus(
        idx=idx,
        url=url,
        status=TargetState(status),
        result=None if result is None else Result.from_json_text(result),
        error=error,
        hint=hint,
        options=_options(options),
        finished_at=finished_at,
    )


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=1024)
def _options(text: str) -> Options:
    # Most targets share a handful of option sets; Options is immutable, so they can share one.
    return Options.from_json(json.loads(text))


def new_job_id() -> str:
    """A fresh job id: 128 random bits, URL-safe (``secrets.token_urlsafe(16)``)."""
    return secrets.token_urlsafe(16)


def is_job_id(value: object) -> bool:
    """True if ``value`` has the shape of a job id (it may still be unknown)."""
    return isinstance(value, str) and _JOB_ID.fullmatch(value) is not None


class Store:
    """Jobs and targets in one SQLite database, through ``sqlite-utils``.

    Open one with :meth:`Store.open`. The tables are ``jobs`` (one row per job) and ``targets``
    (one row per target, keyed by ``job_id, idx``); any SQLite or Datasette user can read them.

    The methods map to the job lifecycle:

    - :meth:`create_job`: idempotency lookup, caps check and insert in one ``BEGIN IMMEDIATE``.
    - :meth:`find_reusable_job` and :meth:`count_live_jobs`: the lookups ``create_job`` makes.
    - :meth:`record_outcome`: store one target's outcome and bump the job's lease, together.
    - :meth:`finish_job`: set a live job's terminal status, once.
    - :meth:`mark_in_flight_failed`: after a restart or at shutdown, fail every live job.
    - :meth:`purge_expired`: delete lapsed jobs in bounded batches.
    - :meth:`get_job`, :meth:`get_status`, :meth:`list_jobs`: reads; lapsed jobs read as absent.

    The ``targets`` table holds ``pending``, ``done`` and ``failed``. A target *reads* as
    ``running`` when its job is ``running`` and it is the next one due (``idx ==
    targets_done``): a job's targets are drained strictly in order, so that is the one being
    fetched. Deriving it costs no write per target, and a restart can never leave a target
    stuck as ``running``: reaping the job is enough.
    """

    def __init__(
        self,
        db: Database,
        *,
        path: str,
        synchronous: str = "NORMAL",
        busy_timeout: float = 5.0,
    ) -> None:
        """Wrap an already configured database; most code wants :meth:`Store.open` instead."""
        self.db = db
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        #: True while a runner is using this Store object (see ``open_runner``).
        self.runner_active = False
        self._lock = threading.RLock()

    # ----------------------------------------------------------------------------------------
    # Opening and closing

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] = ":memory:",
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 5.0,
        wal_autocheckpoint: bool = True,
    ) -> Store:
        """Open or create the database at ``path`` (``":memory:"`` for a private in-memory one).

        File databases are switched to WAL. ``synchronous`` is ``"NORMAL"`` (never loses a
        commit on a process crash, may on power loss) or ``"FULL"`` (power-safe, slower).
        ``busy_timeout`` is how many seconds a write waits for another connection's lock before
        failing with "database is locked". Foreign keys are on. The schema is created, or
        migrated, idempotently; a database written by a newer schema version, or one that is
        not a trio_batch database, raises :class:`SchemaVersionError` and is left untouched.

        ``wal_autocheckpoint=False`` turns off SQLite's automatic WAL checkpoints on this
        connection, for a connection whose commits must never wait on a checkpoint's disk
        flush; something else must then checkpoint (see :meth:`checkpoint`).
        """
        sync = synchronous.upper()
        if sync not in ("NORMAL", "FULL", "EXTRA"):
            raise ValueError(
                f"synchronous must be 'NORMAL', 'FULL' or 'EXTRA', not {synchronous!r}"
            )
        if busy_timeout < 0:
            raise ValueError("busy_timeout must not be negative")
        path = os.fspath(path)
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
            conn = sqlite3.connect(
                path, timeout=busy_timeout, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the database {path!r}: {exc}") from exc
        try:
            db = Database(conn, execute_plugins=False)
            if path != ":memory:" and not path.startswith("file::memory:"):
                db.execute("PRAGMA journal_mode=WAL")  # see is_memory
                # After a checkpoint restarts the WAL, cut the file back to this size.
                db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT:d}")
            db.execute(f"PRAGMA synchronous={sync}")  # validated above: one of three words
            db.execute("PRAGMA foreign_keys=ON")
            if not wal_autocheckpoint:
                db.execute("PRAGMA wal_autocheckpoint=0")
            store = cls(db, path=path, synchronous=sync, busy_timeout=busy_timeout)
            store._migrate()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"cannot open {path!r} as a trio_batch database: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return store

    @property
    def is_memory(self) -> bool:
        """True for a private in-memory database (one connection only; nothing to reopen)."""
        return self.path == ":memory:" or self.path.startswith("file::memory:")

    def reopen(
        self, *, busy_timeout: float | None = None, wal_autocheckpoint: bool = True
    ) -> Store:
        """Open another connection to the same database file, with this store's settings.

        Raises ValueError for an in-memory database, which has no file to reopen.
        """
        if self.is_memory:
            raise ValueError("an in-memory database cannot be reopened")
        return Store.open(
            self.path,
            synchronous=self.synchronous,
            busy_timeout=self.busy_timeout if busy_timeout is None else busy_timeout,
            wal_autocheckpoint=wal_autocheckpoint,
        )

    def checkpoint(self, mode: str = "TRUNCATE") -> None:
        """Copy the WAL's committed pages into the database file, and restart the WAL.

        ``TRUNCATE`` (the default) takes the write lock, copies everything, and empties the
        WAL file, so it cannot grow without end under a steady stream of commits; it waits up
        to the busy timeout for other connections' readers and writers. ``PASSIVE`` never
        waits, but under constant writes it may never get to restart the WAL.
        """
        if mode not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        with self._lock:
            if not self.is_memory:
                self.db.execute(f"PRAGMA wal_checkpoint({mode})")  # one of four words

    def close(self) -> None:
        """Close the connection. The store cannot be used afterwards."""
        with self._lock:
            self.db.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _migrate(self) -> None:
        version = self._user_version()
        if version == SCHEMA_VERSION:
            return  # the common case takes no write lock, so readers can open beside a runner
        self._check_version(version)
        with self.transaction():
            version = self._user_version()  # another process may have migrated meanwhile
            self._check_version(version)
            if version == 0:
                if "jobs" in self.db.table_names() or "targets" in self.db.table_names():
                    raise SchemaVersionError(
                        f"{self.path!r} has jobs/targets tables but no trio_batch schema "
                        "version; it is not a trio_batch database"
                    )
                self._create_schema_v1()
            # Later versions add their steps here: `if version < 2: ...`.
            self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION:d}")

    def _user_version(self) -> int:
        row = self.db.execute("PRAGMA user_version").fetchone()
        return int(row[0])

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path!r} has schema version {version}, newer than the {SCHEMA_VERSION} "
                "this trio_batch understands; upgrade trio_batch to open it"
            )

    def _create_schema_v1(self) -> None:
        self.db.create_table(
            "jobs",
            {
                "id": str,
                "caller": str,
                "caller_class": str,
                "idem_key": str,
                "status": str,
                "error": str,
                "targets_total": int,
                "targets_done": int,
                "targets_failed": int,
                "results_size": int,
                "created_at": float,
                "updated_at": float,
                "expires_at": float,
            },
            pk="id",
            not_null={
                "caller",
                "caller_class",
                "idem_key",
                "status",
                "targets_total",
                "targets_done",
                "targets_failed",
                "results_size",
                "created_at",
                "updated_at",
                "expires_at",
            },
            defaults={"targets_done": 0, "targets_failed": 0, "results_size": 0},
            strict=True,
        )
        self.db.create_table(
            "targets",
            {
                "job_id": str,
                "idx": int,
                "url": str,
                "options": str,
                "status": str,
                "result": str,
                "error": str,
                "hint": str,
                "finished_at": float,
            },
            pk=("job_id", "idx"),
            foreign_keys=[("job_id", "jobs", "id")],
            not_null={"url", "options", "status"},
            strict=True,
        )
        jobs = self.db.table("jobs")
        # Idempotency lookup: (caller, idem_key), then the lease is checked on the few rows found.
        # expires_at stays out of this index: every target write changes it.
        jobs.create_index(["caller", "idem_key"], "jobs_idempotency")
        # Live counts, per caller and in total: status IN ('queued', 'running') [AND caller = ?].
        jobs.create_index(["status", "caller"], "jobs_status")
        # Retention: purge by lease, and list recent jobs.
        jobs.create_index(["expires_at"], "jobs_expiry")

    # ----------------------------------------------------------------------------------------
    # Transactions

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        """Hold the store's lock and run the block in one ``BEGIN IMMEDIATE`` transaction.

        Commits when the block ends, rolls back if it raises. ``BEGIN IMMEDIATE`` takes the
        write lock up front, so a read-then-write block can never fail half-way on
        "database is locked": it waits up to the busy timeout, or fails before doing anything.
        Nested use runs the block in a savepoint of the outer transaction, so it stays atomic on
        its own: if it raises, only its own changes are rolled back.
        """
        conn = self.db.conn  # straight to sqlite3: this wraps every write
        with self._lock:
            if conn.in_transaction:
                conn.execute("SAVEPOINT nested")
                try:
                    yield self.db
                except BaseException:
                    # Some errors (a full disk, I/O) make SQLite roll back the whole
                    # transaction, savepoint and all: then there is nothing left to undo here.
                    if conn.in_transaction:
                        conn.execute("ROLLBACK TO nested")
                        conn.execute("RELEASE nested")
                    raise
                conn.execute("RELEASE nested")
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

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
        status: JobState = JobState.QUEUED,
        job_id: str | None = None,
        now: float | None = None,
    ) -> tuple[Job, bool]:
        """Create a job atomically with its caps check; returns ``(job, reused)``.

        In one ``BEGIN IMMEDIATE`` transaction: if a job with the same ``(caller, idem_key)``
        has an unexpired lease (whatever its status), return it with ``reused=True`` and write
        nothing. Otherwise check the caps, counting live (``queued``/``running``) jobs by status,
        not lease: more than ``targets_per_job`` targets raises :class:`TooManyTargets`, the
        caller already holding ``jobs_per_caller`` live jobs raises :class:`CallerBusy`,
        ``jobs_total`` live jobs in all raises :class:`Busy`. Then insert the job and all its
        targets as ``pending`` with a lease of ``ttl`` seconds, and return ``(job, False)``.

        ``status`` is the new job's status: ``queued``, or ``running`` for a caller that starts
        draining at once. ``job_id`` is the id a new job gets (made with :func:`new_job_id`);
        by default a fresh one. Invalid targets or
        caller names raise :class:`InvalidTargets` / :class:`InvalidRequest` before any I/O.
        """
        caller = check_caller(caller)
        caller_class = check_caller(caller_class, "caller_class")
        targets = check_targets(targets)
        if not JobState(status).is_live:
            raise ValueError(f"a new job is queued or running, not {status}")
        if job_id is not None and not is_job_id(job_id):
            raise ValueError(f"{job_id!r} is not a job id; make one with new_job_id()")
        now = time.time() if now is None else now
        key = idem_key(caller, targets)
        # A reuse needs no write lock: look first with a plain read, then again under the lock
        # (another connection may have created the job in between).
        existing = self.find_reusable_job(caller, key, now=now)
        if existing is not None:
            return existing, True
        with self.transaction():
            existing = self.find_reusable_job(caller, key, now=now)
            if existing is not None:
                return existing, True
            if len(targets) > targets_per_job:
                raise TooManyTargets(
                    f"the job has {len(targets)} targets; the limit is {targets_per_job} per job"
                )
            if self.count_live_jobs(caller) >= jobs_per_caller:
                raise CallerBusy(
                    f"caller {caller!r} already has {jobs_per_caller} live job(s); "
                    "wait for one to finish or cancel it"
                )
            if self.count_live_jobs() >= jobs_total:
                raise Busy(f"all {jobs_total} job slots are taken; retry when a job finishes")
            job = Job(
                id=new_job_id() if job_id is None else job_id,
                status=JobState(status),
                error=None,
                targets_total=len(targets),
                targets_done=0,
                targets_failed=0,
                caller=caller,
                caller_class=caller_class,
                idem_key=key,
                created_at=now,
                updated_at=now,
                expires_at=now + ttl,
            )
            self.db.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job.id,
                    job.status.value,
                    job.error,
                    job.targets_total,
                    job.targets_done,
                    job.targets_failed,
                    job.caller,
                    job.caller_class,
                    job.idem_key,
                    job.created_at,
                    job.updated_at,
                    job.expires_at,
                ),
            )
            self.db.conn.executemany(
                "INSERT INTO targets (job_id, idx, url, options, status) VALUES (?, ?, ?, ?, ?)",
                [
                    (
                        job.id,
                        i,
                        t.url,
                        _dumps(t.options.to_json()),
                        TargetState.PENDING.value,
                    )
                    for i, t in enumerate(targets)
                ],
            )
            return job, False

    def find_reusable_job(self, caller: str, key: str, *, now: float | None = None) -> Job | None:
        """The newest job of ``caller`` with idempotency key ``key`` whose lease has not lapsed."""
        now = time.time() if now is None else now
        with self._lock:
            row = self.db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs "
                "WHERE caller = ? AND idem_key = ? AND expires_at > ? "
                "ORDER BY expires_at DESC LIMIT 1",
                (caller, key, now),
            ).fetchone()
        return None if row is None else _job(row)

    def count_live_jobs(self, caller: str | None = None) -> int:
        """How many jobs are ``queued`` or ``running``: for ``caller``, or in total if None.

        Live is by status, not lease: a live job counts until it reaches a terminal status.
        """
        with self._lock:
            if caller is None:
                row = self.db.execute(
                    "SELECT count(*) FROM jobs WHERE status IN (?, ?)", _LIVE
                ).fetchone()
            else:
                row = self.db.execute(
                    "SELECT count(*) FROM jobs WHERE status IN (?, ?) AND caller = ?",
                    (*_LIVE, caller),
                ).fetchone()
        return int(row[0])

    # ----------------------------------------------------------------------------------------
    # Writing outcomes and statuses

    def record_outcome(
        self,
        job_id: str,
        idx: int,
        *,
        result: Result | None = None,
        error: str | None = None,
        hint: str | None = None,
        ttl: float,
        now: float | None = None,
    ) -> Job | None:
        """Store one target's outcome and bump its job, in one transaction.

        Pass ``result`` for a success, or ``error`` (and optionally ``hint``) for a failure. A
        result that cannot be stored as JSON is stored as a failure saying why. In the same
        transaction the job's ``targets_done`` (and ``targets_failed``), ``updated_at`` and lease
        (``expires_at = now + ttl``) are bumped; if this was the last outcome of a live job, the
        job takes its terminal status: ``done`` (no failures), ``failed`` (all failed) or
        ``partial``.

        Returns the updated job, or None if the job is unknown or its lease has lapsed (nothing
        is written then). Raises :class:`OutcomeExists` if the target already has an outcome or
        does not exist.
        """
        if (result is None) == (error is None):
            raise ValueError("pass exactly one of result= and error=")
        now = time.time() if now is None else now
        result_text: str | None = None
        if result is not None:
            try:
                result_text = result.to_json_text()
            except ValueError as exc:
                error = f"the fetch returned a Result that cannot be stored as JSON: {exc}"
                hint = "make Result.content a str and Result.meta a JSON-serialisable dict"
        status = TargetState.DONE if error is None else TargetState.FAILED
        failed = int(error is not None)
        conn = self.db.conn  # the hot path: straight to sqlite3, no wrapper per statement
        with self.transaction():
            row = conn.execute(
                "UPDATE jobs SET targets_done = targets_done + 1, "
                "targets_failed = targets_failed + ?, results_size = results_size + ?, "
                "updated_at = ?, expires_at = ? "
                f"WHERE id = ? AND expires_at > ? RETURNING {_JOB_COLUMNS}",
                (
                    failed,
                    0 if result_text is None else len(result_text),
                    now,
                    now + ttl,
                    job_id,
                    now,
                ),
            ).fetchone()
            if row is None:
                return None
            job = _job(row)
            if job.targets_done >= job.targets_total and job.status.is_live:
                # The last outcome: the terminal status goes in the same transaction. (Kept
                # out of the bump above, so the status index is only touched once per job.)
                if job.targets_failed == 0:
                    final = JobState.DONE
                elif job.targets_failed >= job.targets_total:
                    final = JobState.FAILED
                else:
                    final = JobState.PARTIAL
                conn.execute("UPDATE jobs SET status = ? WHERE id = ?", (final.value, job_id))
                job = dataclasses.replace(job, status=final)
            updated = conn.execute(
                "UPDATE targets SET status = ?, result = ?, error = ?, hint = ?, finished_at = ? "
                "WHERE job_id = ? AND idx = ? AND status = 'pending'",
                (status.value, result_text, error, hint, now, job_id, idx),
            ).rowcount
            if updated != 1:
                raise OutcomeExists(
                    f"target {idx} of job {job_id} already has an outcome or does not exist"
                )
        return job

    def record_outcomes(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float | None = None
    ) -> list[Job | Exception | None]:
        """Store several outcomes in one transaction (group commit); one answer per write.

        Each write is atomic on its own, in a savepoint, and answers as
        :meth:`record_outcome` would: the updated job, None, or the exception it raised (such as
        :class:`OutcomeExists`) in place of a result. None of them is durable before the shared
        commit; if that commit fails, the error is raised and nothing is stored.
        """
        now = time.time() if now is None else now
        answers: list[Job | Exception | None] = []
        # One write needs no savepoint: record_outcome is its own transaction.
        with self.transaction() if len(writes) > 1 else contextlib.nullcontext():
            for w in writes:
                try:
                    answers.append(
                        self.record_outcome(
                            w.job_id,
                            w.idx,
                            result=w.result,
                            error=w.error,
                            hint=w.hint,
                            ttl=ttl,
                            now=now,
                        )
                    )
                except (OutcomeExists, ValueError) as exc:
                    answers.append(exc)
        return answers

    def finish_job(
        self,
        job_id: str,
        status: JobState,
        *,
        error: str | None = None,
        now: float | None = None,
    ) -> Job | None:
        """Move a live job to a terminal ``status``, exactly once; returns the updated job.

        A guarded update: only a ``queued``/``running`` job with an unexpired lease moves, so a
        terminal status is never overwritten. Outcomes can still be stored afterwards (the target
        in flight when a job is cancelled). Returns None, writing nothing, if the job is
        unknown, lapsed or already terminal.
        """
        status = JobState(status)
        if status.is_live:
            raise ValueError(f"finish_job takes a terminal status, not {status}")
        if not is_job_id(job_id):
            return None
        now = time.time() if now is None else now
        with self.transaction():
            row = self.db.execute(
                "UPDATE jobs SET status = ?, error = ?, updated_at = ? "
                "WHERE id = ? AND status IN (?, ?) AND expires_at > ? "
                f"RETURNING {_JOB_COLUMNS}",
                (status.value, error, now, job_id, *_LIVE, now),
            ).fetchone()
        return None if row is None else _job(row)

    def mark_in_flight_failed(self, reason: str, now: float | None = None) -> int:
        """Fail every ``queued``/``running`` job with ``error=reason``; returns how many.

        For a restart (``"restart"``) or a shutdown (``"shutdown"``): such jobs are never
        resumed. Completed targets and leases are left as they are, so finished work stays
        readable until the lease lapses.
        """
        now = time.time() if now is None else now
        with self.transaction():
            return self.db.execute(
                "UPDATE jobs SET status = 'failed', error = ?, updated_at = ? "
                "WHERE status IN (?, ?)",
                (reason, now, *_LIVE),
            ).rowcount

    def purge_expired(
        self,
        now: float | None = None,
        *,
        batch_size: int = 100,
        max_batches: int | None = None,
    ) -> int:
        """Delete jobs whose lease has lapsed, with their targets; returns how many jobs.

        Works in batches of ``batch_size`` jobs, each its own short transaction, so a huge
        backlog never holds the write lock for long; ``max_batches`` stops early (the caller
        can call again). A job whose lease lapsed while live is deleted too: it is gone.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        now = time.time() if now is None else now
        deleted = 0
        batches = 0
        while max_batches is None or batches < max_batches:
            batches += 1
            with self.transaction():
                ids = [
                    row[0]
                    for row in self.db.execute(
                        "SELECT id FROM jobs WHERE expires_at <= ? ORDER BY expires_at LIMIT ?",
                        (now, batch_size),
                    )
                ]
                if ids:
                    id_list = _dumps(ids)
                    self.db.execute(
                        "DELETE FROM targets WHERE job_id IN (SELECT value FROM json_each(?))",
                        (id_list,),
                    )
                    self.db.execute(
                        "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
                        (id_list,),
                    )
            deleted += len(ids)
            if len(ids) < batch_size:
                break
        return deleted

    # ----------------------------------------------------------------------------------------
    # Reading

    def get_job(self, job_id: str, *, now: float | None = None) -> Job | None:
        """The job with this id, or None if it is unknown, malformed or its lease has lapsed."""
        if not is_job_id(job_id):
            return None
        now = time.time() if now is None else now
        with self._lock:
            row = self.db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ? AND expires_at > ?",
                (job_id, now),
            ).fetchone()
        return None if row is None else _job(row)

    def get_status(
        self, job_id: str, *, now: float | None = None, max_results_size: int | None = None
    ) -> tuple[Job, list[TargetStatus]] | None:
        """The job and its targets in ``idx`` order, read from one snapshot.

        Returns None if the job is unknown, malformed or its lease has lapsed. The target due
        next in a ``running`` job reads as ``running`` (see the class docstring). With
        ``max_results_size``, raises :class:`WouldBlock`, decoding nothing, if the job's stored
        results add up to more characters than that.
        """
        if not is_job_id(job_id):
            return None
        with self._lock:
            own = not self.db.conn.in_transaction
            if own:
                self.db.execute("BEGIN")  # a read transaction: one snapshot for both reads
            try:
                job = self.get_job(job_id, now=now)
                if job is None:
                    return None
                if max_results_size is not None:
                    size = self.db.execute(
                        "SELECT results_size FROM jobs WHERE id = ?", (job_id,)
                    ).fetchone()[0]
                    if size > max_results_size:
                        raise WouldBlock(f"job {job_id} holds {size} characters of results")
                rows = self.db.execute(
                    f"SELECT {_TARGET_COLUMNS} FROM targets WHERE job_id = ? ORDER BY idx",
                    (job_id,),
                ).fetchall()
            finally:
                if own:
                    self.db.execute("COMMIT")
        targets = [_target(row) for row in rows]
        if job.status is JobState.RUNNING and job.targets_done < len(targets):
            due = targets[job.targets_done]
            if due.status is TargetState.PENDING:
                targets[job.targets_done] = dataclasses.replace(due, status=TargetState.RUNNING)
        return job, targets

    def list_jobs(
        self, *, caller: str | None = None, limit: int = 100, now: float | None = None
    ) -> list[Job]:
        """Unexpired jobs, most recently active first; only ``caller``'s if given."""
        now = time.time() if now is None else now
        with self._lock:
            if caller is None:
                rows = self.db.execute(
                    f"SELECT {_JOB_COLUMNS} FROM jobs WHERE expires_at > ? "
                    "ORDER BY expires_at DESC LIMIT ?",
                    (now, limit),
                ).fetchall()
            else:
                rows = self.db.execute(
                    f"SELECT {_JOB_COLUMNS} FROM jobs WHERE caller = ? AND expires_at > ? "
                    "ORDER BY expires_at DESC LIMIT ?",
                    (caller, now, limit),
                ).fetchall()
        return [_job(row) for row in rows]
