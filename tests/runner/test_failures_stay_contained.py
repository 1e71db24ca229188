"""A failure stays as small as it is: one odd exception, one unstorable text, one refused
registration or one locked database never takes down more than its own target or command.

Each case was found by a review of the merged store seam, retries and service hardening; each
test failed on the code the review read, and passes since the fix that followed it.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from trio_batch import (
    Config,
    Job,
    JobState,
    OutcomeWrite,
    Result,
    Store,
    StoreUnavailable,
    Target,
    TargetState,
    TargetStatus,
    open_runner,
    open_store,
)
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresJobStore

from ..support.fakes import FakeClock, ScriptedFetch, urls

T0 = 1_000_000.0
CAPS = {"ttl": 100.0, "targets_per_job": 4, "jobs_per_caller": 2, "jobs_total": 3}


def _targets(*names: str) -> list[Target]:
    return [Target(f"https://example.test/{name}") for name in names]


async def _run_with_first_failing(
    target: str, error: Exception
) -> tuple[Job | None, list[TargetStatus]]:
    """Run a job of two targets on the store ``target`` names; the first raises ``error``."""

    async def fetch(t: Target) -> Result:
        if t.url.endswith("/first"):
            raise error
        return Result("fine")

    store = open_store(target)
    try:
        async with open_runner(store, fetch, Config(ttl=100)) as runner:
            job_id, _ = await runner.submit("alice", "default", _targets("first", "second"))
            job = await runner.wait(job_id)
            status = await runner.status(job_id)
    finally:
        await store.aclose()
    assert status is not None
    return job, status[1]


# ---------------------------------------------------------------------------------------------
# 1. PostgreSQL: a failure text with a NUL byte cannot be stored, and the raw psycopg error
#    escapes the JobStore; the runner then fails the whole job instead of the one target.


async def test_postgres_target_error_with_nul_fails_only_that_target(pg_dsn: str) -> None:
    job, targets = await _run_with_first_failing(
        pg_dsn, ValueError("the body had a \x00 byte in it")
    )
    assert job is not None
    # As on SQLite: the one target failed, the next one was fetched, the job is partial.
    assert [t.status for t in targets] == [TargetState.FAILED, TargetState.DONE]
    assert job.status == JobState.PARTIAL, job.error


async def test_postgres_record_outcome_with_nul_answers_like_sqlite(pg_dsn: str) -> None:
    store = open_store(pg_dsn)
    try:
        job, _ = await store.create_job(
            NewJob("alice", "default", _targets("a", "b"), status=JobState.RUNNING, **CAPS), now=T0
        )
        write = OutcomeWrite(job.id, 0, error="ValueError: a \x00 b", hint="see \x00")
        try:
            answer = await store.record_outcome(write, ttl=100.0, now=T0)
        except psycopg.Error as exc:  # the driver's own error must never come out
            pytest.fail(f"psycopg's own error came out of the JobStore: {exc!r}")
        assert answer is not None and answer.targets_failed == 1
    finally:
        await store.aclose()


# ---------------------------------------------------------------------------------------------
# 2. PostgreSQL: a claim whose registration fails leaves its heartbeat thread running.


def _heartbeat_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "trio_batch postgres heartbeat"}


async def test_postgres_failed_claim_leaves_no_heartbeat_thread(pg_dsn: str) -> None:
    store = open_store(pg_dsn)
    assert isinstance(store, PostgresJobStore)
    try:
        # The registration cannot be written: its table is gone (any refused write does).
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("DROP TABLE runners")
        before = _heartbeat_threads()
        with pytest.raises(StoreUnavailable):
            async with store.claim(heartbeat_interval=1.0, runner_timeout=5.0):
                pass  # pragma: no cover - never entered
        # A stopped StoreThread ends once it has drained its queue (however long a loaded
        # machine takes); one left running never does.
        for thread in _heartbeat_threads() - before:
            await trio.to_thread.run_sync(thread.join, 60)  # a hang guard, not a speed check
        assert _heartbeat_threads() <= before
    finally:
        await store.aclose()


# ---------------------------------------------------------------------------------------------
# 3. The runner reads a failed fetch's ``hint`` unguarded: one odd exception fails the job.


class _HintlessError(Exception):
    """An exception whose ``hint`` cannot be read (a lazy property that fails, say)."""

    @property
    def hint(self) -> str:
        raise RuntimeError("no hint here")


async def test_exception_with_unreadable_hint_fails_only_its_target() -> None:
    job, targets = await _run_with_first_failing(":memory:", _HintlessError("boom"))
    assert job is not None
    assert [t.status for t in targets] == [TargetState.FAILED, TargetState.DONE]
    assert targets[0].error == "_HintlessError: boom"
    assert job.status == JobState.PARTIAL, job.error


# ---------------------------------------------------------------------------------------------
# 4. The command line: a database that refuses a call crashes status/results/jobs/forget/gc
#    with a traceback instead of one line and a documented exit code.


def test_cli_gc_on_a_locked_database_reports_one_line(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    Store.open(db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process writing, past the busy timeout
        url = f"sqlite:///{db}?busy_timeout=0.1"  # a short timeout: the same refusal, sooner
        proc = subprocess.run(
            [sys.executable, "-m", "trio_batch", "gc", "--db", url],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("trio-batch: ") and proc.stderr.count("\n") == 1
    assert proc.returncode == 1


# ---------------------------------------------------------------------------------------------
# 5. One job's unstorable Result fails the other jobs sharing its group commit.


class _EvilMeta(dict[str, Any]):
    """A dict that json.dumps cannot walk (its items() raises something not a ValueError)."""

    def items(self) -> Any:
        raise RuntimeError("no items for you")


async def test_an_unstorable_result_fails_only_its_own_target(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    evil, good = "https://example.test/evil", "https://example.test/good"
    fetch.custom[evil] = lambda: Result("x", _EvilMeta(a=1))
    (evil_started, evil_go), (good_started, good_go) = fetch.gate(evil), fetch.gate(good)
    async with open_runner(store, fetch, Config(ttl=100), now=clock) as runner:
        bad_id, _ = await runner.submit("mallory", "user", urls("evil", "after"))
        good_id, _ = await runner.submit("alice", "user", urls("good"))
        await evil_started.wait()
        await good_started.wait()
        evil_go.set()
        good_go.set()  # both outcomes are ready at once: one group commit
        good_job = await runner.wait(good_id)
        await runner.wait(bad_id)
        bad_status = await runner.status(bad_id)
    assert good_job is not None
    assert (good_job.status, good_job.error) == (JobState.DONE, None)
    assert bad_status is not None
    bad_job, bad_targets = bad_status
    assert bad_targets[0].status == TargetState.FAILED  # a clear stored error on the target
    assert bad_job.status == JobState.PARTIAL  # and the job went on
