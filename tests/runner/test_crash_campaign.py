"""Crash campaign: a busy runner killed with SIGKILL at random moments loses and invents nothing.

One file database is reused across every kill, so history accumulates. Each round starts
``crash_child.py`` (a runner with several callers submitting, waiting and cancelling), kills it
with SIGKILL after a random delay, and checks the database:

- ``PRAGMA integrity_check`` is ok and no foreign key dangles;
- no job stays ``queued``/``running`` after the next ``open_runner`` (most rounds the parent
  opens one; in the others the next child's own start must reap them);
- every stored outcome is what the fetch returned for that target, per the child's side log,
  and the fetch ran at most once per target;
- the stored targets of a job form a prefix in ``idx`` order, and the job's ``targets_done`` /
  ``targets_failed`` equal its stored outcomes;
- each terminal job's status is the one its outcomes imply (``done``, ``partial`` or ``failed``
  once every outcome is stored), unless it was cancelled or reaped as ``restart`` with an
  outcome missing;
- a fetch result never reaches the store only when the kill cut its job short: at most one per
  job (the target due next, of a job reaped or cancelled and never waited for), so at most one
  per caller per kill;
- a job stays as ``Runner.wait`` reported it to its caller (terminal), whatever follows;
- nothing is stored twice, and nothing checked in an earlier round has changed since.

``TRIO_BATCH_SOAK=1`` runs 200 kills instead of 20.
"""

from __future__ import annotations

import json
import random
import select
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_batch import Store, open_runner

from ..support.crash_child import CALLERS
from ..support.fakes import ScriptedFetch
from ..support.figures import SOAK, Figures, scaled
from ..support.invariants import status_mismatch

# SIGKILLs a runner at random moments, round after round: left out of make test-fast.
pytestmark = pytest.mark.slow

CHILD = Path(__file__).parent.parent / "support" / "crash_child.py"
SEED = 20240604
KILLS = scaled(20, 200)
#: Chance that a round kills the child without waiting for its runner to be up.
EARLY_KILL = 0.15
#: Chance that the parent leaves the reaping to the next child's ``open_runner``.
CHILD_REAPS = 0.3
#: Hang guard for a child to print "up" (not a speed check).
UP_TIMEOUT = 60.0

_LIVE = ("queued", "running")
#: Errors the runner stores for a fetch it cancelled (Config.target_timeout, cancel_grace).
RUNNER_ERRORS = ("timeout", "cancelled")
#: Chance that a child runs with a short target_timeout and cancel_grace.
TIMEOUTS = 0.3


@dataclass
class Campaign:
    """What the parent knows across rounds."""

    root: Path
    violations: list[str] = field(default_factory=list)
    #: url -> what the fetch produced for it (one entry per fetch call).
    fetched: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: job id -> the status ``Runner.wait`` returned to its caller.
    waited: dict[str, str | None] = field(default_factory=dict)
    #: job id -> (the round that ran it, its fetch results that never reached the store).
    unstored: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: Every job seen terminal, as first seen: nothing about it may change afterwards.
    frozen: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    #: Jobs left live at a round the parent did not reap: the next child's start must reap them.
    left_live: set[str] = field(default_factory=set)
    early_kills: int = 0
    child_reaped: int = 0
    reaped: int = 0

    def violation(self, round_no: int, message: str) -> None:
        self.violations.append(f"kill {round_no}: {message}")

    def read_side_log(self, path: Path) -> None:
        if not path.exists():
            return
        lines = path.read_text(encoding="utf-8").split("\n")
        # The last line may be cut short by the kill: that fetch never returned.
        for number, line in enumerate(lines):
            if not line:
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                if number != len(lines) - 1:
                    raise
                continue
            if "job" in entry:
                self.waited[entry["job"]] = entry["waited"]
            else:
                self.fetched.setdefault(entry["url"], []).append(entry)


def _reap_in_parent(db: Path) -> tuple[int, list[str]]:
    """Open a runner on ``db``; returns the jobs live inside it and the URLs it fetched (a
    reaped job must never be resumed, so none)."""
    never = ScriptedFetch()

    async def reopen() -> int:
        with Store.open(db) as store:
            async with open_runner(store, never):
                return store.count_live_jobs()

    return trio.run(reopen), never.calls


def _live_jobs(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'jobs'").fetchone():
            return set()
        return {row[0] for row in conn.execute("SELECT id FROM jobs WHERE status IN (?, ?)", _LIVE)}
    finally:
        conn.close()


def _check_database(
    campaign: Campaign, round_no: int, db: Path, *, reaped: bool, child_came_up: bool
) -> None:
    """Check every invariant on the database as the killed child (and any reaping) left it.

    ``reaped``: the parent has just run ``open_runner``, so no job may be live.
    ``child_came_up``: the child passed its own ``open_runner``, which must have reaped every
    job the previous round left live.
    """
    conn = sqlite3.connect(db)
    try:
        integrity = conn.execute("PRAGMA integrity_check").fetchall()
        if integrity != [("ok",)]:
            campaign.violation(round_no, f"integrity_check says {integrity[:5]}")
            return
        dangling = conn.execute("PRAGMA foreign_key_check").fetchall()
        if dangling:
            campaign.violation(round_no, f"foreign_key_check says {dangling[:5]}")
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if "jobs" not in tables:
            return  # killed before the schema was ever committed
        jobs, targets = read_rows(conn)
    finally:
        conn.close()
    check_rows(campaign, round_no, jobs, targets, reaped=reaped, child_came_up=child_came_up)


def read_rows(conn: Any) -> tuple[list[tuple[Any, ...]], dict[str, list[tuple[Any, ...]]]]:
    """The jobs and their targets as :func:`check_rows` takes them, from an sqlite3 or a psycopg
    connection (the same SQL reads both)."""
    jobs = conn.execute(
        "SELECT id, status, error, targets_total, targets_done, targets_failed FROM jobs"
    ).fetchall()
    targets: dict[str, list[tuple[Any, ...]]] = {}
    for row in conn.execute(
        "SELECT job_id, idx, url, status, result, error FROM targets ORDER BY job_id, idx"
    ):
        targets.setdefault(row[0], []).append(row[1:])
    return jobs, targets


def check_rows(
    campaign: Campaign,
    round_no: int,
    jobs: list[tuple[Any, ...]],
    targets: dict[str, list[tuple[Any, ...]]],
    *,
    reaped: bool,
    child_came_up: bool,
) -> None:
    """Check the invariants on the jobs ``(id, status, error, total, done, failed)`` and their
    targets ``job id -> [(idx, url, status, result, error)]`` in ``idx`` order, read from any
    backend; see :func:`_check_database` for ``reaped`` and ``child_came_up``."""
    seen_ids = {job[0] for job in jobs}
    for job_id in campaign.frozen.keys() - seen_ids:
        campaign.violation(round_no, f"job {job_id} vanished")
    stored_urls: set[str] = set()
    for job_id, status, error, total, done, failed in jobs:
        rows = targets.get(job_id, [])
        if job_id in campaign.waited:
            told = campaign.waited[job_id]  # what wait returned to the job's caller
            if told != status or told in _LIVE:
                campaign.violation(round_no, f"job {job_id} is {status}; wait said {told}")
        if status in _LIVE:
            if reaped or (child_came_up and job_id in campaign.left_live):
                campaign.violation(round_no, f"job {job_id} still {status} after open_runner")
            continue
        if job_id in campaign.left_live and error != "restart":
            campaign.violation(round_no, f"job {job_id} left live became {status}/{error}")
        if len(rows) != total or [r[0] for r in rows] != list(range(total)):
            campaign.violation(round_no, f"job {job_id} has targets {[r[0] for r in rows]}")
            continue
        statuses = [r[2] for r in rows]
        outcomes = sum(s != "pending" for s in statuses)
        if statuses[outcomes:] != ["pending"] * (total - outcomes):
            campaign.violation(round_no, f"job {job_id} outcomes are not a prefix: {statuses}")
        if (done, failed) != (outcomes, statuses.count("failed")):
            campaign.violation(
                round_no,
                f"job {job_id} counts done={done} failed={failed}, stored {statuses}",
            )
        mismatch = status_mismatch(status, error, total, done, failed)
        if mismatch:
            campaign.violation(round_no, f"job {job_id} {mismatch}")
        _check_unstored(campaign, round_no, job_id, status, error, done, rows)
        for idx, url, target_status, result, target_error in rows:
            if target_status == "pending":
                continue
            if url in stored_urls:
                campaign.violation(round_no, f"{url} stored twice")
            stored_urls.add(url)
            produced = campaign.fetched.get(url, [])
            if target_error in RUNNER_ERRORS:
                # The runner cancelled the fetch (timeout or cancel grace): it never returned.
                if produced:
                    campaign.violation(round_no, f"{url}: stored {target_error!r}, fetch returned")
                continue
            if len(produced) != 1:
                campaign.violation(
                    round_no, f"job {job_id} target {idx} was fetched {len(produced)} times"
                )
                continue
            entry = produced[0]
            if target_status == "done":
                stored = json.loads(result)
                if "content" not in entry or stored != {
                    "content": entry["content"],
                    "meta": entry["meta"],
                }:
                    campaign.violation(round_no, f"{url}: stored result differs from the fetch's")
            elif target_error != entry.get("error"):
                campaign.violation(
                    round_no, f"{url}: stored error {target_error!r:.200}, fetch gave another"
                )
        snapshot = (status, error, total, done, failed, tuple(rows))
        before = campaign.frozen.setdefault(job_id, snapshot)
        if before != snapshot:
            names = ("status", "error", "total", "done", "failed", "targets")
            changed = [n for n, a, b in zip(names, before, snapshot, strict=True) if a != b]
            campaign.violation(round_no, f"terminal job {job_id} changed its {changed}")
    campaign.left_live = {job[0] for job in jobs if job[1] in _LIVE}


def _check_unstored(
    campaign: Campaign,
    round_no: int,
    job_id: str,
    status: str,
    error: str | None,
    done: int,
    rows: list[tuple[Any, ...]],
) -> None:
    """Fetch results that never reached the store: only the one a kill cut short."""
    lost = [
        idx
        for idx, url, target_status, *_ in rows
        if target_status == "pending" and url in campaign.fetched
    ]
    campaign.unstored[job_id] = (rows[0][1].split("/")[3], len(lost))
    if not lost:
        return
    cut_short = error == "restart" or (status == "cancelled" and job_id not in campaign.waited)
    if not cut_short or lost != [done]:
        waited = campaign.waited.get(job_id, "never")
        campaign.violation(
            round_no,
            f"job {job_id} ({status}, error {error!r}, {done} done, wait said {waited}): "
            f"the fetch results of targets {lost} never reached the store",
        )


def _kill_round(campaign: Campaign, round_no: int, rng: random.Random, db: Path) -> None:
    side_log = campaign.root / f"side-{round_no}.jsonl"
    stderr_path = campaign.root / f"child-{round_no}.err"
    synchronous = "FULL" if rng.random() < 0.2 else "NORMAL"
    timeouts = rng.random() < TIMEOUTS
    early = rng.random() < EARLY_KILL
    delay = rng.uniform(0, 0.4) if early else rng.uniform(0, 0.5)
    with stderr_path.open("wb") as stderr:
        child = subprocess.Popen(
            [
                sys.executable,
                str(CHILD),
                str(db),
                str(side_log),
                str(round_no),
                str(rng.getrandbits(32)),
                synchronous,
                "1" if timeouts else "0",
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    came_up = False
    try:
        assert child.stdout is not None
        if not early:
            ready, _, _ = select.select([child.stdout], [], [], UP_TIMEOUT)
            came_up = bool(ready) and child.stdout.readline().strip() == b"up"
            if not came_up:
                campaign.violation(round_no, "the child never came up")
        time.sleep(delay)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    if early:
        campaign.early_kills += 1
    if child.returncode != -signal.SIGKILL:
        err = stderr_path.read_text(errors="replace")[-2000:]
        campaign.violation(round_no, f"the child exited with {child.returncode}: {err}")
    campaign.read_side_log(side_log)
    if db.exists():  # as the killed child left it, before anything else opens it
        conn = sqlite3.connect(db)
        try:
            integrity = conn.execute("PRAGMA integrity_check").fetchall()
        finally:
            conn.close()
        if integrity != [("ok",)]:
            campaign.violation(round_no, f"integrity_check after the kill says {integrity[:5]}")
            return

    if campaign.left_live:
        # Jobs the previous round left live: this child's start reaped them if it got that far.
        campaign.child_reaped += len(campaign.left_live - _live_jobs(db))
    parent_reaps = round_no == KILLS - 1 or rng.random() >= CHILD_REAPS
    if parent_reaps:
        campaign.reaped += len(_live_jobs(db))
        live, resumed = _reap_in_parent(db)
        if live:
            campaign.violation(round_no, f"{live} live jobs inside a fresh open_runner")
        if resumed:
            campaign.violation(round_no, f"reaped jobs were resumed: {resumed[:5]}")
    _check_database(campaign, round_no, db, reaped=parent_reaps, child_came_up=came_up)


@pytest.mark.timeout(1800 if SOAK else 300)
def test_sigkill_at_random_moments_loses_and_invents_nothing(
    tmp_path: Path, figures: Figures
) -> None:
    rng = random.Random(SEED)
    db = tmp_path / "campaign.db"
    campaign = Campaign(tmp_path)
    started = time.monotonic()
    for round_no in range(KILLS):
        _kill_round(campaign, round_no, rng, db)
    elapsed = time.monotonic() - started

    conn = sqlite3.connect(db)
    try:
        jobs, outcomes = conn.execute(
            "SELECT count(*), coalesce(sum(targets_done), 0) FROM jobs"
        ).fetchone()
        restarts = conn.execute("SELECT count(*) FROM jobs WHERE error = 'restart'").fetchone()[0]
        cut_short = conn.execute(
            "SELECT count(*) FROM targets WHERE error IN (?, ?)", RUNNER_ERRORS
        ).fetchone()[0]
    finally:
        conn.close()
    fetched = sum(len(entries) for entries in campaign.fetched.values())
    lost_per_kill: dict[str, int] = {}
    for run, lost in campaign.unstored.values():
        lost_per_kill[run] = lost_per_kill.get(run, 0) + lost
    for run, lost in sorted(lost_per_kill.items()):
        if lost > CALLERS:  # each caller has at most one job draining
            campaign.violation(int(run), f"{lost} fetch results never reached the store")
    never_stored = sum(lost_per_kill.values())
    figures.add(f"crash campaign: {KILLS} kills, {len(campaign.violations)} violations")
    figures.add(
        f"crash campaign: {jobs} jobs, {outcomes} outcomes stored ({cut_short} of them "
        f"'timeout'/'cancelled' by the runner), the fetch returned {fetched} times, "
        f"{restarts} jobs reaped as 'restart' ({campaign.reaped} by the parent, "
        f"{campaign.child_reaped} by a child's start), {never_stored} fetch results cut "
        f"short by a kill (at most one per job, {max(lost_per_kill.values(), default=0)} "
        f"at the worst kill, bound {CALLERS}), {len(campaign.waited)} waits checked, "
        f"{campaign.early_kills} kills before the runner was up, {elapsed:.1f} s"
    )
    assert campaign.violations == [], "\n".join(campaign.violations[:30])
