"""The SQLite store's operations: jobs, their targets, leases and caps.

Plain and synchronous: nothing here knows about trio, HTTP or fetching. The runner reaches it
through :class:`~trio_batch.store.sqlite.SQLiteJobStore`, which runs it on its store thread.
The connection, its pragmas and transactions are in :mod:`._connection`.

Time
----
Times are Unix epoch seconds stored as ``REAL`` (what ``time.time()`` returns): the runner's
injected clock produces them directly, lease comparisons are plain numeric comparisons an index
can serve, and anyone reading the tables can convert with ``datetime(expires_at, 'unixepoch')``.
Every method that needs the time takes ``now=``; it defaults to ``time.time()``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..._event import new_event_id
from ..._model import (
    Job,
    JobState,
    is_job_id,
)
from .._new_job import check_caps, new_job
from .._protocol import Admission, NewJob, ReapedJob
from .._rows import dumps, forgettable
from .._rows import job_from_row as _job
from . import _queries as q
from ._outcomes import StoreOutcomes

__all__ = ["Store", "admitted"]

#: The JSON array of a job's URLs for INSERT_PLAIN_TARGETS (SQLite reads UTF-8 JSON as is).
_URLS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: SQLite's largest integer: a cap above it is bound as it (no count of jobs reaches it), as
#: sqlite3 refuses to bind a larger int (OverflowError) and Config takes any.
_MAX_CAP = 2**63 - 1


def admitted(want: Admission, row: tuple[Any, ...]) -> Job | None:
    """What an ``ADMISSION`` row answers for ``want``: the job to reuse, or None if a job may
    be created; raises the cap it would break."""
    if row[0] is not None:
        return _job(row[:-2])
    verdict = row[-1]  # the caller's newest live job, NULL for all slots taken, or a version
    check_caps(
        want,
        caller_live=lambda: want.jobs_per_caller if isinstance(verdict, str) else 0,
        total_live=lambda: want.jobs_total if verdict is None else 0,
        blocking_job=lambda: verdict or None,
    )
    return None


class Store(StoreOutcomes):
    """Jobs and targets in one SQLite database, through ``sqlite-utils``.

    Open one with :meth:`Store.open`. The tables are ``jobs`` (one row per job) and ``targets``
    (one row per target, keyed by ``job_id, idx``); any SQLite or Datasette user can read them.

    The methods map to the job lifecycle:

    - :meth:`create_job`: idempotency lookup, caps check and insert, atomically;
      :meth:`find_reusable_job` and :meth:`count_live_jobs`: its lookups on their own.
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

    No method lets an error of ``sqlite3`` out: one the database raises (its lock held by
    another connection past the busy timeout, a full disk, an I/O error, a damaged file)
    leaves as :class:`~trio_batch.StoreUnavailable`, the call having changed nothing, and a
    call on a closed store as :class:`~trio_batch.StoreError`; the ``sqlite3`` error is the
    ``__cause__``.
    """

    #: The last admission read on this connection: ``(want, now, _written(), row)``.
    _admission_read: tuple[Admission, float, tuple[int, int], tuple[Any, ...]] | None = None

    # ----------------------------------------------------------------------------------------
    # Creating jobs

    def create_job(self, new: NewJob, *, now: float | None = None) -> tuple[Job, bool]:
        """Create a job atomically with its caps check; returns ``(job, reused)``.

        Atomic: if a job with the same ``(caller, idem_key)`` has an unexpired lease (whatever
        its status), return it with ``reused=True`` and write nothing. Otherwise check the caps,
        counting live (``queued``/``running``) jobs by status, not lease: more than
        ``targets_per_job`` targets raises :class:`TooManyTargets`, the caller already holding
        ``jobs_per_caller`` live jobs raises :class:`CallerBusy`, ``jobs_total`` live jobs in
        all raises :class:`Busy`. Then insert the job and all its
        targets as ``pending`` with a lease of ``ttl`` seconds, and return ``(job, False)``.
        A reuse or a refusal is answered from the first read and takes no write lock; an
        insert takes it (``BEGIN IMMEDIATE``), and reads again first if another connection
        committed since.

        ``new.status`` is the new job's status: ``queued``, or ``running`` for a caller that
        starts draining at once. ``new.job_id`` is the id a new job gets (made with
        :func:`new_job_id`); by default a fresh one. With ``new.webhook_url`` or
        ``new.callback``, the new job gets an outbox row (see :meth:`JobStore.create_job`).
        Invalid targets or caller names raise :class:`InvalidTargets` / :class:`InvalidRequest`
        before any I/O.
        """
        now = time.time() if now is None else now
        insert = new_job(new, now=now)
        job = insert.job
        want = new.admission(job)
        conn = self.db.conn
        # Held throughout, so no other thread commits on this connection between the read
        # and the lock, which the data version would not show.
        with self._locked():
            row = self._admission_row(want, now)
            existing = admitted(want, row)
            if existing is not None:
                return existing, True
            with self.transaction():
                if self._data_version() != row[-1]:  # another connection committed since
                    existing = admitted(want, self._admission_row(want, now))
                    if existing is not None:
                        return existing, True
                conn.execute(q.INSERT_JOB, insert.job_params())
                urls = insert.plain_urls()
                if urls is None:
                    conn.executemany(q.INSERT_TARGET, insert.target_params())
                else:
                    conn.execute(q.INSERT_PLAIN_TARGETS, (job.id, _URLS.encode(urls)))
                if job.metadata:
                    conn.executemany(q.INSERT_LABEL, insert.label_params())
                if new.webhook_url is not None or new.callback:
                    outbox_row = (job.id, new_event_id(), new.webhook_url, new.callback)
                    conn.execute(q.INSERT_OUTBOX, outbox_row)
                return job, False

    def _data_version(self) -> int:
        """SQLite's count of commits by other connections: the same twice, nothing changed."""
        return int(self.db.conn.execute(q.DATA_VERSION).fetchone()[0])

    def _admission_row(self, want: Admission, now: float) -> tuple[Any, ...]:
        """The ``ADMISSION`` row of ``want`` (see :func:`admitted`): the lookup and the caps'
        verdict in one statement, so they see one snapshot."""
        row: tuple[Any, ...] = self.db.conn.execute(
            q.ADMISSION,
            (
                want.caller,
                want.idem_key,
                now,
                min(want.jobs_per_caller, _MAX_CAP),
                min(want.jobs_total, _MAX_CAP),
            ),
        ).fetchone()
        return row

    def find_reusable_job(self, caller: str, key: str, *, now: float | None = None) -> Job | None:
        """The newest job of ``caller`` with idempotency key ``key`` whose lease has not lapsed."""
        now = time.time() if now is None else now
        with self._locked():
            row = self.db.execute(q.FIND_REUSABLE, (caller, key, now)).fetchone()
        return None if row is None else _job(row)

    def count_live_jobs(self, caller: str | None = None) -> int:
        """How many jobs are ``queued`` or ``running``: for ``caller``, or in total if None.

        Live is by status, not lease: a live job counts until it reaches a terminal status.
        """
        with self._locked():
            if caller is None:
                row = self.db.execute(q.COUNT_LIVE).fetchone()
            else:
                row = self.db.execute(q.COUNT_LIVE_OF_CALLER, (caller,)).fetchone()
        return int(row[0])

    # ----------------------------------------------------------------------------------------
    # Statuses

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
            row = self.db.execute(q.FINISH_JOB, (status.value, error, now, job_id, now)).fetchone()
            if row is not None:
                self.db.execute(q.EMIT_EVENT, (now, now, now, job_id))
        return None if row is None else _job(row)

    def mark_in_flight_failed(self, reason: str, now: float | None = None) -> int:
        """Fail every ``queued``/``running`` job with ``error=reason``; returns how many."""
        return len(self.fail_live(reason, now))

    def fail_live(self, reason: str, now: float | None = None) -> list[ReapedJob]:
        """Fail every ``queued``/``running`` job with ``error=reason``; returns them, with
        their trace contexts.

        For a restart (``"restart"``) or a shutdown (``"shutdown"``): such jobs are never
        resumed. Completed targets and leases are left as they are, so finished work stays
        readable until the lease lapses.
        """
        now = time.time() if now is None else now
        with self.transaction():
            rows = self.db.execute(q.FAIL_LIVE, (reason, now)).fetchall()
            if rows:
                ids = [row[0] for row in rows]
                self.db.execute(q.EMIT_EVENTS, (now, now, now, dumps(ids)))
            return [ReapedJob(row[0], row[1]) for row in rows]

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
                ids = [row[0] for row in self.db.execute(q.LAPSED_IDS, (now, batch_size))]
                if ids:
                    id_list = dumps(ids)
                    self.db.execute(q.DELETE_TARGETS_OF, (id_list,))
                    self.db.execute(q.DELETE_LABELS_OF, (id_list,))
                    self.db.execute(q.DELETE_OUTBOX_OF, (id_list,))
                    self.db.execute(q.DELETE_JOBS, (id_list,))
            deleted += len(ids)
            if len(ids) < batch_size:
                break
        return deleted

    # ----------------------------------------------------------------------------------------
    # Forgetting (the reads are in StoreReads)

    def forget_job(
        self, job_id: str, *, caller: str | None = None, now: float | None = None
    ) -> Job | None:
        """Delete a terminal job and its targets in one transaction; see ``JobStore``."""
        if not is_job_id(job_id):
            return None
        now = time.time() if now is None else now
        with self.transaction():
            row = self.db.execute(q.GET_JOB, (job_id, now)).fetchone()
            job = forgettable(None if row is None else _job(row), caller)
            if job is None:
                return None
            self.db.execute(q.FORGET_TARGETS, (job_id,))
            self.db.execute(q.FORGET_LABELS, (job_id,))
            self.db.execute(q.FORGET_OUTBOX, (job_id,))
            self.db.execute(q.FORGET_JOB, (job_id,))
        return job
