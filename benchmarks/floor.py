"""The physical floor: the same SQL trio_batch needs, on a raw stdlib ``sqlite3`` connection.

The database is created with :meth:`trio_batch.Store.open` (so the schema and indexes are the
store's own), then used through a plain connection opened with the store's PRAGMAs: WAL,
``synchronous=NORMAL``, foreign keys on, a 5 s busy timeout, autocommit with explicit
``BEGIN IMMEDIATE``/``COMMIT``. Nothing here crosses a thread or an event loop.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import time
from dataclasses import dataclass

from trio_batch import Store

#: What the no-op fetch's ``Result("")`` is stored as.
EMPTY_RESULT = '{"content":"","meta":{}}'

_JOB_COLUMNS = (
    "id, status, error, targets_total, targets_done, targets_failed, caller, caller_class, "
    "idem_key, created_at, updated_at, expires_at"
)
_TARGET_COLUMNS = "idx, url, status, result, error, hint, options, finished_at"
#: A job's targets from one JSON array of their URLs, in one statement, as the store inserts
#: plain targets (``INSERT_PLAIN_TARGETS``): executemany of a row each takes about twice as long.
_INSERT_TARGETS = (
    "INSERT INTO targets (job_id, idx, url, options, status, result, finished_at) "
    "SELECT ?1, key, value, '{}', ?3, ?4, ?5 FROM json_each(?2)"
)
_TTL = 86400.0


def create_db(path: str) -> None:
    """Create (or migrate) a trio_batch database at ``path`` and close it again."""
    Store.open(path).close()


def connect(path: str) -> sqlite3.Connection:
    """A raw connection with the store's PRAGMAs (WAL, synchronous=NORMAL, foreign keys)."""
    conn = sqlite3.connect(path, timeout=5.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def new_job_id() -> str:
    """A job id of the shape the store uses (22 URL-safe characters)."""
    return secrets.token_urlsafe(16)


def job_row(
    job_id: str,
    *,
    caller: str,
    targets: int,
    status: str = "running",
    done: int = 0,
    failed: int = 0,
    now: float,
    expires_at: float | None = None,
) -> tuple[object, ...]:
    """A ``jobs`` row in column order."""
    key = hashlib.sha256(job_id.encode()).hexdigest()
    expires = now + _TTL if expires_at is None else expires_at
    return (job_id, status, None, targets, done, failed, caller, "bench", key, now, now, expires)


def target_rows(
    job_id: str, targets: int, *, status: str = "pending", finished_at: float | None = None
) -> tuple[str, str, str, str | None, float | None]:
    """``_INSERT_TARGETS``' parameters for the ``targets`` rows of one job: its id, its URLs as
    one JSON array, and the status, result and ``finished_at`` they all have."""
    urls = json.dumps([f"https://floor.test/{job_id}/{idx}" for idx in range(targets)])
    result = EMPTY_RESULT if status == "done" else None
    return (job_id, urls, status, result, finished_at)


def insert_job(
    conn: sqlite3.Connection,
    job: tuple[object, ...],
    targets: int,
    *,
    status: str = "pending",
    finished_at: float | None = None,
) -> None:
    """Insert a job row and its targets (inside the caller's transaction, if any)."""
    conn.execute(f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", job)
    conn.execute(
        _INSERT_TARGETS, target_rows(str(job[0]), targets, status=status, finished_at=finished_at)
    )


def pending_work(
    conn: sqlite3.Connection, targets: int, targets_per_job: int
) -> list[tuple[str, int]]:
    """Insert running jobs holding ``targets`` pending targets; their ``(job_id, idx)`` pairs."""
    now = time.time()
    work: list[tuple[str, int]] = []
    conn.execute("BEGIN IMMEDIATE")
    for j in range(-(-targets // targets_per_job)):
        job_id = new_job_id()
        n = min(targets_per_job, targets - j * targets_per_job)
        insert_job(conn, job_row(job_id, caller=f"floor{j}", targets=n, now=now), n)
        work.extend((job_id, idx) for idx in range(n))
    conn.execute("COMMIT")
    return work


def floor_throughput(path: str, *, targets: int, targets_per_job: int = 32) -> float:
    """Targets/s of one committed transaction per target on a raw connection.

    Each transaction is what storing one outcome minimally takes: ``BEGIN IMMEDIATE``, update
    the target row with its result, bump the job's counters and lease, ``COMMIT``.
    """
    create_db(path)
    conn = connect(path)
    try:
        work = pending_work(conn, targets, targets_per_job)
        start = time.perf_counter()
        for job_id, idx in work:
            t = time.time()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "UPDATE targets SET status = 'done', result = ?, finished_at = ? "
                "WHERE job_id = ? AND idx = ? AND status IN ('pending', 'running')",
                (EMPTY_RESULT, t, job_id, idx),
            )
            conn.execute(
                "UPDATE jobs SET targets_done = targets_done + 1, updated_at = ?, "
                "expires_at = ? WHERE id = ?",
                (t, t + _TTL, job_id),
            )
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    return len(work) / elapsed


@dataclass(frozen=True, slots=True)
class RawLatency:
    """Raw SQL costs, in seconds per call."""

    submit: list[float]
    status: list[float]


def raw_latency(path: str, *, samples: int, targets_per_job: int = 32) -> RawLatency:
    """The raw SQL cost of what ``submit`` and ``status`` do, ``samples`` times each.

    Submit: ``BEGIN IMMEDIATE``, the idempotency lookup, the two live-job counts, the job insert,
    the targets' one ``INSERT ... SELECT`` over ``json_each``, ``COMMIT`` (ids, keys and the
    targets' JSON are prepared outside the timing). Status: ``BEGIN``, select the job, select
    its targets in order, ``COMMIT``, on a finished job of ``targets_per_job`` targets with
    stored results. ``path`` must exist.
    """
    conn = connect(path)
    try:
        submit: list[float] = []
        for i in range(samples):
            now = time.time()
            job_id = new_job_id()
            caller = f"raw-submit-{i}"
            # Stored as finished so the live counts stay as small as the runner's.
            job = job_row(job_id, caller=caller, targets=targets_per_job, status="done", now=now)
            rows = target_rows(job_id, targets_per_job)
            key = str(job[8])
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE caller = ? AND idem_key = ? "
                "AND expires_at > ? ORDER BY expires_at DESC LIMIT 1",
                (caller, key, now),
            ).fetchone()
            conn.execute(
                "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running') AND caller = ?",
                (caller,),
            ).fetchone()
            conn.execute(
                "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
            ).fetchone()
            conn.execute(f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", job)
            conn.execute(_INSERT_TARGETS, rows)
            conn.execute("COMMIT")
            submit.append(time.perf_counter() - start)

        now = time.time()
        job_id = new_job_id()
        conn.execute("BEGIN IMMEDIATE")
        insert_job(
            conn,
            job_row(
                job_id,
                caller="raw-status",
                targets=targets_per_job,
                status="done",
                done=targets_per_job,
                now=now,
            ),
            targets_per_job,
            status="done",
            finished_at=now,
        )
        conn.execute("COMMIT")
        status: list[float] = []
        for _ in range(samples):
            start = time.perf_counter()
            conn.execute("BEGIN")
            conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ? AND expires_at > ?",
                (job_id, time.time()),
            ).fetchone()
            conn.execute(
                f"SELECT {_TARGET_COLUMNS} FROM targets WHERE job_id = ? ORDER BY idx", (job_id,)
            ).fetchall()
            conn.execute("COMMIT")
            status.append(time.perf_counter() - start)
    finally:
        conn.close()
    return RawLatency(submit=submit, status=status)
