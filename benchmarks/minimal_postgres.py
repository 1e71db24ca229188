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
import trio
import trio.lowlevel

from trio_batch.store.postgres import PostgresStore
from trio_batch.store.postgres import _queries as q

from . import floor

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

_Write = tuple[str, int, str, bool]


def _aborted(_: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


def measure(url: str, *, callers: int, jobs: int, targets_per_job: int = 32) -> float:
    """Targets/s of ``callers`` concurrent callers, each running ``jobs`` jobs back to back
    (``callers=1``: the serial case), on the (fresh) database at ``url``."""
    PostgresStore.open(url).close()  # the store's schema, made by the store
    conn = psycopg.connect(url, autocommit=True)
    batch: list[tuple[_Write, trio.lowlevel.Task | None]] = []

    def store_one(write: _Write, t: float) -> None:
        job_id, idx, text, last = write
        if conn.execute(_BUMP, (t, t + _TTL, job_id, t)).rowcount != 1:
            raise LookupError(f"job {job_id} is unknown or lapsed")
        if last:
            conn.execute(_FINISH, ("done", job_id))
        if conn.execute(_STORE, (text, t, job_id, idx)).rowcount != 1:
            raise LookupError(f"target {idx} of job {job_id} already has an outcome")

    def commit(
        writes: list[tuple[_Write, trio.lowlevel.Task | None]],
    ) -> list[outcome.Outcome[None]]:
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

    async def store(write: _Write) -> None:
        if batch:  # a leader is gathering: join its commit
            batch.append((write, trio.lowlevel.current_task()))
            await trio.lowlevel.wait_task_rescheduled(_aborted)
            return
        batch.append((write, None))
        await trio.lowlevel.cancel_shielded_checkpoint()  # let the others' outcomes join
        writes = batch[:]
        batch.clear()
        try:
            answers = commit(writes)
        except Exception as exc:  # the whole commit failed: every writer gets its error
            answers = [outcome.Error(exc) for _ in writes]
        for (_, task), answer in zip(writes, answers, strict=True):
            if task is not None:
                trio.lowlevel.reschedule(task, answer)
            else:
                answer.unwrap()

    async def fetch(url: str) -> str:
        return ""

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
            conn.execute(q.INSERT_JOB, (*job, now + _TTL, "{}", None, None))
            with conn.cursor() as cur:
                cur.executemany(
                    q.INSERT_TARGET,
                    [(job_id, idx, url, "{}", "pending", None) for idx, url in enumerate(urls)],
                )
        return job_id

    async def drain(job_id: str, urls: list[str], stopped: trio.Event) -> None:
        last = len(urls) - 1
        for idx, url in enumerate(urls):
            content = await fetch(url)
            text = json.dumps({"content": content, "meta": {}}, separators=(",", ":"))
            await store((job_id, idx, text, idx == last))
        stopped.set()

    async def caller(c: int, nursery: trio.Nursery) -> None:
        for j in range(jobs):
            urls = [f"https://minimal.test/{c}/{j}/{idx}" for idx in range(targets_per_job)]
            job_id = submit(f"caller{c}", urls)
            stopped = trio.Event()
            nursery.start_soon(drain, job_id, urls, stopped)
            await stopped.wait()

    async def main() -> float:
        async with trio.open_nursery() as drains:
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for c in range(callers):
                    nursery.start_soon(caller, c, drains)
            return time.perf_counter() - start

    try:
        elapsed = trio.run(main)
    finally:
        conn.close()
    return callers * jobs * targets_per_job / elapsed
