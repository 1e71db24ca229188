"""The soak's load against the least runner: how late its heartbeat is without trio_batch.

``TRIO_BATCH_SOAK=1 .venv/bin/python -m pytest tests/http/test_load.py -q -s -p
benchmarks.soak_floor`` runs the soak of ``tests/http/test_load.py`` (the same submitters,
heartbeat, cap sampler, figures and checks) with its ``open_runner`` replaced by
:func:`open_least_runner`: the least trio code that answers the soak's calls with the same
guarantees, none of trio_batch's layers (no store seam, retries, timeouts, observers or group
commit). Its figures beside the soak's own, one run after the other in one checkout, tell how
much of the event loop's lag is trio_batch's and how much the load's: 1,000 submitters
retrying refusals on a loop that also stores every outcome.

:class:`LeastRunner` runs everything on the loop thread on one raw connection with the store's
PRAGMAs, as :mod:`benchmarks.minimal` does, but for its WAL checkpoints, which a thread makes
(``TRIO_BATCH_SOAK_FLOOR_CHECKPOINTS_ON_LOOP=1``: SQLite's own, in the loop's commits):

- ``submit`` yields once (``TRIO_BATCH_SOAK_FLOOR_PACING=1``: waits for room in a pass budget,
  as trio_batch's submits do), then reads the reuse and the caps in one statement (the store's
  ``ADMISSION``) and raises ``CallerBusy`` or ``Busy`` from it; a submit it admits reads
  again under ``BEGIN IMMEDIATE`` and inserts the job and its targets in that transaction,
  then spawns the job's drain into a long-lived nursery;
- each drain fetches its targets in order and commits each outcome (the target, the job's
  counters and lease, the terminal status with the last) before the next; a cancelled job's
  drain stops after the outcome in flight;
- ``cancel`` marks a live job ``cancelled`` in one statement; ``status`` reads the job and its
  targets in one snapshot; ``wait`` waits for the drain's event, then reads the job.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
import trio

from trio_batch import Busy, CallerBusy, Config, Job, Result, Target, TargetStatus
from trio_batch._loop_budget import LoopBudget
from trio_batch.runner._runner import SUBMIT_PASS_BUDGET
from trio_batch.store._rows import job_from_row, target_from_row
from trio_batch.store.sqlite import _queries as q

from . import floor

__all__ = ["LeastRunner", "open_least_runner"]

_TTL = 86400.0
_LIVE = "('queued', 'running')"
#: One outcome counted into its unexpired job, its lease bumped.
_BUMP = (
    "UPDATE jobs SET targets_done = targets_done + 1, targets_failed = targets_failed + ?, "
    "results_size = results_size + ?, updated_at = ?, expires_at = ? "
    "WHERE id = ? AND expires_at > ?"
)
#: The terminal status, with the last outcome, only while the job is live.
_FINISH = f"UPDATE jobs SET status = ? WHERE id = ? AND status IN {_LIVE}"
_CANCEL = (
    "UPDATE jobs SET status = 'cancelled', updated_at = ? "
    f"WHERE id = ? AND status IN {_LIVE} AND expires_at > ?"
)
#: Commits between two checkpoints, where they are made off the loop (SQLite's own default:
#: a checkpoint once the WAL holds 1,000 pages; a commit here writes a few).
CHECKPOINT_EVERY = 1000
_URLS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

Fetch = Callable[[Target], Awaitable[Result]]


def _end(failed: int, total: int, last: bool) -> str | None:
    """The terminal status the last outcome sets; None before it."""
    if not last:
        return None
    return "done" if not failed else "failed" if failed == total else "partial"


class _Refused(Exception):
    """A write the store would refuse (a lapsed job, a target already stored): undone."""


class _Drain:
    """One job's drain: whether it was cancelled, and when it stopped."""

    __slots__ = ("cancelled", "stopped")

    def __init__(self) -> None:
        self.cancelled = False
        self.stopped = trio.Event()


class LeastRunner:
    """The soak's four calls (submit, cancel, status, wait), on the loop, on one connection."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        fetch: Fetch,
        config: Config,
        nursery: trio.Nursery,
        pacing: LoopBudget | None = None,
    ) -> None:
        self._conn, self._fetch, self._config, self._nursery = conn, fetch, config, nursery
        self._pacing = pacing
        self._drains: dict[str, _Drain] = {}
        self._side: sqlite3.Connection | None = None  # the checkpoints', in a thread
        self._commits = 0  # since the last checkpoint began
        self._checkpointing = False

    def checkpoint_off_the_loop(self, side: sqlite3.Connection) -> None:
        """Checkpoint the WAL on ``side``, in a thread, every :data:`CHECKPOINT_EVERY` commits,
        instead of SQLite's automatic checkpoints on the loop (turned off here)."""
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self._side = side

    def _committed(self) -> None:
        self._commits += 1
        if self._side is not None and self._commits >= CHECKPOINT_EVERY and not self._checkpointing:
            self._commits, self._checkpointing = 0, True
            self._nursery.start_soon(self._checkpoint, self._side)

    async def _checkpoint(self, side: sqlite3.Connection) -> None:
        try:  # PASSIVE: the loop goes on committing beside the copy
            await trio.to_thread.run_sync(side.execute, "PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            self._checkpointing = False

    async def submit(
        self, caller: str, caller_class: str, targets: Sequence[Target]
    ) -> tuple[str, bool]:
        """A new job of ``targets`` (or the caller's unexpired one of the same targets, reused);
        raises ``CallerBusy`` or ``Busy`` when a cap refuses it."""
        pacing = self._pacing
        if pacing is None:
            await trio.lowlevel.checkpoint()
            return self._submit(caller, caller_class, targets)
        await pacing.wait_for_room(cancellable=True)
        began = time.perf_counter()
        try:
            return self._submit(caller, caller_class, targets)
        finally:
            pacing.used += time.perf_counter() - began

    def _submit(
        self, caller: str, caller_class: str, targets: Sequence[Target]
    ) -> tuple[str, bool]:
        text = _URLS.encode([t.url for t in targets])
        key = hashlib.sha256(text.encode()).hexdigest()
        now = time.time()
        reused = self._admit(caller, key, now)
        if reused is not None:
            return reused, True
        with self._transaction() as conn:
            reused = self._admit(caller, key, now)  # again, under the lock
            if reused is not None:
                return reused, True
            job_id = floor.new_job_id()
            job = (job_id, "running", None, len(targets), 0, 0, caller, caller_class, key)
            conn.execute(q.INSERT_JOB, (*job, now, now, now + _TTL, "{}", None, None))
            conn.execute(q.INSERT_PLAIN_TARGETS, (job_id, text))
        drain = self._drains[job_id] = _Drain()
        self._nursery.start_soon(self._drain, job_id, list(targets), drain)
        return job_id, False

    def _admit(self, caller: str, key: str, now: float) -> str | None:
        """The id of the job to reuse, or None if one may be created; raises a refusal."""
        config = self._config
        row = self._conn.execute(
            q.ADMISSION, (caller, key, now, config.jobs_per_caller, config.jobs_total)
        ).fetchone()
        if row[0] is not None:
            return str(row[0])
        verdict = row[-1]
        if isinstance(verdict, str):
            raise CallerBusy(f"{caller} has a live job", job_id=verdict or None)
        if verdict is None:
            raise Busy("every job slot is taken")
        return None

    async def _drain(self, job_id: str, targets: list[Target], drain: _Drain) -> None:
        try:
            failed, last = 0, len(targets) - 1
            for idx, target in enumerate(targets):
                if drain.cancelled:
                    break
                try:
                    text, error = (await self._fetch(target)).to_json_text(), None
                except Exception as exc:  # a failed target: stored as such, never raised
                    text, error = None, f"{type(exc).__name__}: {exc}"
                failed += error is not None
                self._store(job_id, idx, text, error, _end(failed, len(targets), idx == last))
        finally:
            del self._drains[job_id]
            drain.stopped.set()

    def _store(
        self, job_id: str, idx: int, text: str | None, error: str | None, end: str | None
    ) -> None:
        """One outcome in one transaction; a lapsed job or a stored target changes nothing."""
        now, size = time.time(), 0 if text is None else len(text)
        try:
            with self._transaction() as conn:
                bumped = conn.execute(
                    _BUMP, (error is not None, size, now, now + _TTL, job_id, now)
                ).rowcount
                status = "done" if error is None else "failed"
                stored = conn.execute(
                    q.STORE_OUTCOME, (status, text, error, None, now, 1, job_id, idx)
                ).rowcount
                if bumped != 1 or stored != 1:
                    raise _Refused
                if end is not None:
                    conn.execute(_FINISH, (end, job_id))
        except _Refused:
            pass  # rolled back: nothing changed

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (toward the next checkpoint); on an exception,
        ``ROLLBACK``."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._committed()

    async def cancel(self, job_id: str) -> bool:
        """Mark a live job ``cancelled``; its drain stops after the outcome in flight."""
        await trio.lowlevel.checkpoint()
        now = time.time()
        if self._conn.execute(_CANCEL, (now, job_id, now)).rowcount != 1:
            return False
        drain = self._drains.get(job_id)
        if drain is not None:
            drain.cancelled = True
        return True

    async def status(self, job_id: str) -> tuple[Job, list[TargetStatus]] | None:
        """The job and its targets, from one snapshot; None if unknown or lapsed."""
        await trio.lowlevel.checkpoint()
        conn = self._conn
        conn.execute("BEGIN")
        try:
            row = conn.execute(q.GET_JOB, (job_id, time.time())).fetchone()
            rows = [] if row is None else conn.execute(q.GET_TARGETS, (job_id,)).fetchall()
        finally:
            conn.execute("COMMIT")
        return None if row is None else (job_from_row(row), [target_from_row(r) for r in rows])

    async def wait(self, job_id: str) -> Job | None:
        """The job once its drain has stopped (at once if none runs); None if unknown."""
        drain = self._drains.get(job_id)
        if drain is None:
            await trio.lowlevel.checkpoint()
        else:
            await drain.stopped.wait()
        row = self._conn.execute(q.GET_JOB, (job_id, time.time())).fetchone()
        return None if row is None else job_from_row(row)


#: Set (to anything but ``""`` or ``0``), the plugin's runner paces its submits.
PACING_ENV = "TRIO_BATCH_SOAK_FLOOR_PACING"
#: Set, the plugin's runner leaves SQLite's automatic checkpoints in the loop's commits.
ON_LOOP_ENV = "TRIO_BATCH_SOAK_FLOOR_CHECKPOINTS_ON_LOOP"


@asynccontextmanager
async def open_least_runner(
    store: Any,
    fetch: Fetch,
    config: Config | None = None,
    *,
    paced: bool = False,
    checkpoints_on_loop: bool = False,
) -> AsyncIterator[LeastRunner]:
    """A :class:`LeastRunner` on ``store``'s database file (a trio_batch ``Store``, opened), with
    its own connection and nursery, in ``open_runner``'s place.

    ``paced``: its submits are paced over the loop's passes as trio_batch's are (a
    :class:`~trio_batch._loop_budget.LoopBudget` of ``SUBMIT_PASS_BUDGET``), here charged with
    the whole of each submit's work on the loop, not only its checks. ``checkpoints_on_loop``:
    SQLite's automatic checkpoints run in the loop's commits (as in :mod:`benchmarks.minimal`);
    by default they are made off the loop, in a thread, as trio_batch's are."""
    path = store.db.execute("PRAGMA database_list").fetchone()[2]
    conn, side = floor.connect(path), floor.connect(path)
    pacing = LoopBudget(SUBMIT_PASS_BUDGET) if paced else None
    if pacing is not None:
        pacing.install()
    try:
        async with trio.open_nursery() as nursery:
            runner = LeastRunner(conn, fetch, config or Config(), nursery, pacing)
            if not checkpoints_on_loop:
                runner.checkpoint_off_the_loop(side)
            yield runner
            nursery.cancel_scope.cancel()  # every drain has stopped by now: the soak waited
    finally:
        if pacing is not None:
            pacing.uninstall()
        conn.close()
        side.close()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Run the soak's load against :class:`LeastRunner` instead of trio_batch's runner, paced
    if :data:`PACING_ENV` is set."""
    load = sys.modules.get("tests.http.test_load")
    if load is None:
        return
    paced, on_loop = (
        os.environ.get(name, "") not in ("", "0") for name in (PACING_ENV, ON_LOOP_ENV)
    )

    def opener(store: Any, fetch: Fetch, config: Config | None = None) -> Any:
        return open_least_runner(store, fetch, config, paced=paced, checkpoints_on_loop=on_loop)

    setattr(load, "open_runner", opener)  # noqa: B010 (tests/ is not typed)
    how = f"{'paced' if paced else 'not paced'}, checkpoints {'on' if on_loop else 'off'} the loop"
    print(f"soak_floor: the load runs against LeastRunner, {how}", file=sys.stderr)
