"""The least trio code that does what trio_batch's drains must: a reference for the runner.

:mod:`benchmarks.floor` times the SQL of storing outcomes alone, one commit per target, with
nothing around it. This module adds the least that trio_batch's guarantees take on top, with
none of a library's layers (the store seam, retries, timeouts, cancellation, observers):

- each job is submitted in one ``BEGIN IMMEDIATE`` transaction: the idempotency lookup, the
  two live-job counts of the caps, the job row and its targets' rows (one ``INSERT ...
  SELECT`` over ``json_each`` of their URLs, as the store inserts plain targets);
- each job is drained by a task of its own, spawned into a long-lived nursery, that fetches its
  targets in order through an ``async`` fetch function returning ``""``;
- each outcome (the result's JSON, the job's counters and lease) is committed before that job's
  next target starts, the job's terminal status in the same transaction as its last outcome;
- each write is checked as the store checks it (the job known and unexpired, the target still
  pending, the terminal status set only on a live job) and, refused, changes nothing;
- outcomes of drains ready at the same moment share one commit, each write in its own savepoint
  when it shares it, as the store does (with ``savepoints=False``, none: a refused write then
  fails the whole commit); a leader that resumes ahead of the writers the last commit woke
  yields once more for them to join, as the store's group commit does;
- with one caller, a drain alone in the last commit commits at once without yielding to
  gather, as trio_batch's group commit lets it, until the pass has spent the store's loop
  budget on commits (``FAST_PASS_BUDGET``); then it yields first, as the store's fast path
  does (:func:`run_bare_loop`'s ``pass_budget``);
- the caller waits for the drain to finish (an event).

Everything runs on the loop thread on one raw connection with the store's PRAGMAs, as the floor
does (SQLite's automatic WAL checkpoints included, on the loop thread). What trio_batch does in
its place costs more by design (a checkpoint off the loop, a compare-and-set on the job as the
drain saw it, a fallback for every refusal): read the ratio between this and the runner as
the price of the library's layers, and this one against the floor as what trio and the
guarantees cost at the least.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable

import outcome
import trio
import trio.lowlevel

from trio_batch.store.sqlite import _queries as q
from trio_batch.store.sqlite._paths import FAST_PASS_BUDGET

from . import floor

_TTL = 86400.0
#: A job's bump: its counters and lease (the floor's statement).
_BUMP = (
    "UPDATE jobs SET targets_done = targets_done + 1, updated_at = ?, expires_at = ? "
    "WHERE id = ? AND expires_at > ?"
)
_STORE = (
    "UPDATE targets SET status = 'done', result = ?, finished_at = ?, attempts = 1 "
    "WHERE job_id = ? AND idx = ? AND status = 'pending'"
)
#: A job's URLs as one JSON array, as the store encodes them for INSERT_PLAIN_TARGETS.
_URLS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: The terminal status, with the last outcome, only while the job is live.
_FINISH = "UPDATE jobs SET status = ? WHERE id = ? AND status IN ('queued', 'running')"


def _aborted(_: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


def measure(
    path: str, *, callers: int, jobs: int, targets_per_job: int = 32, savepoints: bool = True
) -> float:
    """Targets/s of ``callers`` concurrent callers, each running ``jobs`` jobs back to back
    (``callers=1``: the serial case), on a fresh database at ``path``."""
    floor.create_db(path)
    conn = floor.connect(path)

    def store_one(job_id: str, idx: int, text: str, last: bool, t: float) -> None:
        """One write, checked as the store checks it (raises, for the caller to undo it)."""
        if conn.execute(_BUMP, (t, t + _TTL, job_id, t)).rowcount != 1:
            raise LookupError(f"job {job_id} is unknown or lapsed")
        if last:
            conn.execute(_FINISH, ("done", job_id))
        if conn.execute(_STORE, (text, t, job_id, idx)).rowcount != 1:
            raise LookupError(f"target {idx} of job {job_id} already has an outcome")

    def commit(writes: Pending) -> list[outcome.Outcome[None]]:
        """One transaction; each write all-or-nothing (a savepoint when it shares the commit)."""
        t = time.time()
        shared = savepoints and len(writes) > 1
        answers: list[outcome.Outcome[None]] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for (job_id, idx, text, last), _ in writes:
                if shared:
                    conn.execute("SAVEPOINT write")
                try:
                    store_one(job_id, idx, text, last, t)
                except LookupError as exc:
                    if not shared:
                        raise
                    conn.execute("ROLLBACK TO write")
                    answers.append(outcome.Error(exc))
                else:
                    answers.append(outcome.Value(None))
                if shared:
                    conn.execute("RELEASE write")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return answers

    def submit(caller: str, urls: list[str]) -> str:
        now = time.time()
        job_id = floor.new_job_id()
        # One JSON text of the URLs: the key's and the targets' rows' (as the store inserts
        # plain targets: one INSERT ... SELECT over json_each).
        text = _URLS.encode(urls)
        key = hashlib.sha256(text.encode()).hexdigest()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(q.FIND_REUSABLE, (caller, key, now)).fetchone()
        conn.execute(q.COUNT_LIVE_OF_CALLER, (caller,)).fetchone()
        conn.execute(q.COUNT_LIVE).fetchone()
        job = (job_id, "running", None, len(urls), 0, 0, caller, "bench", key, now, now)
        # No metadata, no parent, no trace context.
        conn.execute(q.INSERT_JOB, (*job, now + _TTL, "{}", None, None))
        conn.execute(q.INSERT_PLAIN_TARGETS, (job_id, text))
        conn.execute("COMMIT")
        return job_id

    try:
        return run_bare_loop(
            commit,
            submit,
            callers=callers,
            jobs=jobs,
            targets_per_job=targets_per_job,
            # Beside other callers, the shortcut split commits (5% more CPU per target):
            # they keep gathering, so that the baseline is the faster of the two either way.
            pass_budget=FAST_PASS_BUDGET if callers == 1 else None,
        )
    finally:
        conn.close()


class _PassBudget(trio.abc.Instrument):
    """The loop time spent committing in the current pass of trio's scheduler."""

    used = 0.0

    def after_io_wait(self, timeout: float) -> None:
        self.used = 0.0


#: An outcome to store: (job id, target index, result JSON, the job's last target?).
Write = tuple[str, int, str, bool]
#: Writes waiting for a commit, each with the task waiting for it (None: the leader's own).
Pending = list[tuple[Write, trio.lowlevel.Task | None]]


def run_bare_loop(
    commit: Callable[[Pending], list[outcome.Outcome[None]]],
    submit: Callable[[str, list[str]], str],
    *,
    callers: int,
    jobs: int,
    targets_per_job: int,
    pass_budget: float | None = None,
) -> float:
    """Targets/s of the bare loop over a backend's ``submit`` (one transaction per job) and
    ``commit`` (one transaction for the writes ready together, each answered on its own):
    ``callers`` tasks submit ``jobs`` jobs back to back, each drained by a task of its own in
    a long-lived nursery, the caller waiting for its drain. Shared by every backend's bare
    loop, so the loops differ only in their SQL.

    ``pass_budget`` (seconds), for a backend whose commits run on the loop thread (SQLite's,
    as the store's fast path): a writer alone in the last commit, with no writer woken by a
    commit still to resume, commits without the gathering yield, as trio_batch's group commit
    lets it, while the pass has spent less than that on commits. Without it (a backend whose
    store awaits a socket for every commit, and so yields anyway), every write yields to
    gather."""
    batch: Pending = []
    sole: str | None = None  # the job whose write was alone in the last commit
    waking = 0  # writers the last commit woke that have not resumed yet
    budget = _PassBudget()

    def commit_all(writes: Pending) -> list[outcome.Outcome[None]]:
        try:
            return commit(writes)
        except Exception as exc:  # the whole commit failed: every writer gets its error
            return [outcome.Error(exc) for _ in writes]  # an outcome unwraps only once

    def commit_timed(writes: Pending) -> list[outcome.Outcome[None]]:
        started = time.perf_counter()
        try:
            return commit_all(writes)
        finally:
            budget.used += time.perf_counter() - started

    async def store(write: Write) -> None:
        nonlocal sole, waking
        if batch:  # a leader is gathering: join its commit
            batch.append((write, trio.lowlevel.current_task()))
            try:
                await trio.lowlevel.wait_task_rescheduled(_aborted)
            finally:
                waking -= 1
            return
        if (
            pass_budget is not None
            and write[0] == sole
            and not waking
            and budget.used <= pass_budget
        ):  # nobody else is writing: on the spot, no yield
            commit_timed([(write, None)])[0].unwrap()
            return
        batch.append((write, None))
        await trio.lowlevel.cancel_shielded_checkpoint()  # let the others' outcomes join
        if waking:  # ahead of the writers the last commit woke: let them join too
            await trio.lowlevel.cancel_shielded_checkpoint()
        writes = batch[:]
        batch.clear()
        if pass_budget is None:  # every write gathers: nothing to note
            answers = commit_all(writes)
        else:
            sole = write[0] if len(writes) == 1 else None
            answers = commit_timed(writes)
        waking += len(writes) - 1
        for (_, task), answer in zip(writes, answers, strict=True):
            if task is not None:
                trio.lowlevel.reschedule(task, answer)
            else:
                answer.unwrap()

    async def fetch(url: str) -> str:
        return ""

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
        if pass_budget is not None:
            trio.lowlevel.add_instrument(budget)
        async with trio.open_nursery() as drains:
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for c in range(callers):
                    nursery.start_soon(caller, c, drains)
            return time.perf_counter() - start

    return callers * jobs * targets_per_job / trio.run(main)
