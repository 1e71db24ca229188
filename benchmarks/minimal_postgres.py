"""The least trio code that does what trio_batch's drains must, on PostgreSQL: a reference.

:mod:`benchmarks.minimal` for the PostgreSQL backend: the same cycle (each caller submits a job,
waits for it, then submits the next), the same guarantees at their least, on the store's own
schema, from one synchronous psycopg connection on the loop thread (no store thread, no
seam, no retries, no heartbeats, no notifications):

- each job is submitted in one transaction under the creation lock (``pg_advisory_xact_lock``):
  the idempotency lookup, the two live-job counts of the caps, the job row and its targets';
- each job is drained by a task of its own, spawned into a long-lived nursery, that fetches its
  targets in order through an ``async`` fetch function returning ``""``;
- each outcome (the target's result, the job's counters and lease, the terminal status with
  the last one) is committed before that job's next target starts, each write checked (the job
  unexpired, the target still pending) and, refused, changing nothing;
- outcomes of drains ready at the same moment share one commit, each write in a savepoint when
  it shares it;
- the caller waits for the drain to finish (an event).

Read the runner against it as the price of the library's layers on PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import time

import outcome
import psycopg

from trio_batch.store.postgres import PostgresStore
from trio_batch.store.postgres import _queries as q

from . import floor
from .minimal import Pending, Write, run_bare_loop

_TTL = 86400.0
_BUMP = (
    "UPDATE jobs SET targets_done = targets_done + 1, updated_at = %s, expires_at = %s "
    "WHERE id = %s AND expires_at > %s"
)
_STORE = (
    "UPDATE targets SET status = 'done', result = %s, finished_at = %s, attempts = 1 "
    "WHERE job_id = %s AND idx = %s AND status = 'pending'"
)
_FINISH = f"UPDATE jobs SET status = %s WHERE id = %s AND status IN {q.LIVE}"


def measure(
    url: str, *, callers: int, jobs: int, targets_per_job: int = 32, pooled: bool = False
) -> float:
    """Targets/s of ``callers`` concurrent callers, each running ``jobs`` jobs back to back
    (``callers=1``: the serial case), on the (fresh) database at ``url``; ``pooled``: ``url``
    is a pooler's in transaction mode, so no statement is prepared (as the store's)."""
    PostgresStore.open(url).close()  # the store's schema, made by the store
    conn = psycopg.connect(url, autocommit=True, prepare_threshold=None if pooled else 5)

    def store_one(write: Write, t: float) -> None:
        job_id, idx, text, last = write
        if conn.execute(_BUMP, (t, t + _TTL, job_id, t)).rowcount != 1:
            raise LookupError(f"job {job_id} is unknown or lapsed")
        if last:
            conn.execute(_FINISH, ("done", job_id))
        if conn.execute(_STORE, (text, t, job_id, idx)).rowcount != 1:
            raise LookupError(f"target {idx} of job {job_id} already has an outcome")

    def commit(writes: Pending) -> list[outcome.Outcome[None]]:
        t = time.time()
        shared = len(writes) > 1
        answers: list[outcome.Outcome[None]] = []
        with conn.transaction():
            for write, _ in writes:
                if not shared:
                    store_one(write, t)
                    answers.append(outcome.Value(None))
                    continue
                try:
                    with conn.transaction():  # a savepoint
                        store_one(write, t)
                except LookupError as exc:
                    answers.append(outcome.Error(exc))
                else:
                    answers.append(outcome.Value(None))
        return answers

    def submit(caller: str, urls: list[str]) -> str:
        now = time.time()
        job_id = floor.new_job_id()
        key = hashlib.sha256(json.dumps(urls).encode()).hexdigest()
        with conn.transaction():
            conn.execute(q.XACT_LOCK, (q.LOCK_CLASS, q.LOCK_CREATE))
            conn.execute(q.FIND_REUSABLE, (caller, key, now)).fetchone()
            conn.execute(q.COUNT_LIVE_OF_CALLER, (caller,)).fetchone()
            conn.execute(q.COUNT_LIVE).fetchone()
            conn.execute(q.RETIRE_LAPSED, (caller, key, now))
            job = (job_id, "running", None, len(urls), 0, 0, caller, "bench", key, now, now)
            conn.execute(q.INSERT_JOB, (*job, now + _TTL, "{}", None, None, None))
            conn.execute(
                q.INSERT_TARGETS, (job_id, "pending", urls, ["{}"] * len(urls), [None] * len(urls))
            )
        return job_id

    try:
        return run_bare_loop(
            commit, submit, callers=callers, jobs=jobs, targets_per_job=targets_per_job
        )
    finally:
        conn.close()
