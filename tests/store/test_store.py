"""The SQLite store: atomic creation with caps, outcomes, leases, terminal statuses, retention."""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from trio_batch import (
    SCHEMA_VERSION,
    Busy,
    CallerBusy,
    InvalidRequest,
    InvalidTargets,
    Job,
    JobState,
    Options,
    OutcomeExists,
    OutcomeWrite,
    Result,
    SchemaVersionError,
    Store,
    StoreError,
    StoreUnavailable,
    Target,
    TargetState,
    TargetStatus,
    TooManyTargets,
    idem_key,
)
from trio_batch.store import JobFilter, NewJob
from trio_batch.store.sqlite import _outbox
from trio_batch.store.sqlite import _queries as q
from trio_batch.store.sqlite._views import job_overview, latest_retry, one_target, targets_after

from ..support.fakes import PLAIN, WITH_OPTIONS, Shifting

T0 = 1_000_000.0
TTL = 100.0
CAPS: dict[str, Any] = {"ttl": TTL, "targets_per_job": 4, "jobs_per_caller": 1, "jobs_total": 3}


def targets(n: int, prefix: str = "https://example.com/") -> list[Target]:
    return [Target(f"{prefix}{i}") for i in range(n)]


def targets_of(store: Store, job_id: str) -> list[TargetStatus]:
    status = store.get_status(job_id, now=T0)
    assert status is not None
    return status[1]


def create(store: Store, caller: str = "alice", n: int = 3, **kw: Any) -> tuple[Any, bool]:
    now = kw.pop("now", T0)
    return store.create_job(NewJob(caller, "user", targets(n), **{**CAPS, **kw}), now=now)


# ---------------------------------------------------------------------------------------------
# Opening and the schema


def test_open_file_database_uses_wal_foreign_keys_and_schema_version(tmp_path: Path) -> None:
    with Store.open(tmp_path / "jobs.db") as store:
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert store.db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert {"jobs", "targets"} <= set(store.db.table_names())
    with Store.open(tmp_path / "jobs.db", synchronous="full") as store:
        assert store.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_reopening_keeps_data_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with Store.open(path) as store:
        job, _ = create(store)
    with Store.open(path) as store:
        assert store.get_job(job.id, now=T0) == job


def test_open_refuses_a_newer_schema_without_touching_it(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.execute("CREATE TABLE jobs (x)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaVersionError, match="newer than"):
        Store.open(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    assert conn.execute("SELECT sql FROM sqlite_master").fetchall() == [("CREATE TABLE jobs (x)",)]


def test_open_refuses_a_database_that_is_not_ours(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE jobs (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaVersionError, match="not a trio_batch database"):
        Store.open(path)


def test_open_wraps_a_path_that_cannot_be_opened(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open the database"):
        Store.open(tmp_path / "no" / "such" / "dir" / "jobs.db")


def test_a_reuse_takes_no_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = Store.open(path, busy_timeout=0)
    job, _ = create(store)
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        again, reused = create(store)
        assert reused and again.id == job.id
        with pytest.raises(StoreUnavailable, match="locked") as refused:
            create(store, "bob")  # a new job does need the lock
        assert isinstance(refused.value.__cause__, sqlite3.OperationalError)
    finally:
        locker.execute("ROLLBACK")


def test_a_refusal_takes_no_write_lock(tmp_path: Path) -> None:
    # A thousand submits refused while the slots are taken must not each queue for the lock.
    path = tmp_path / "jobs.db"
    store = Store.open(path, busy_timeout=0)
    alices, _ = create(store, "alice")
    create(store, "bob")
    create(store, "carol")
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(CallerBusy) as refused:
            create(store, "alice", n=2)
        assert refused.value.job_id == alices.id
        with pytest.raises(Busy, match="all 3 job slots"):
            create(store, "dave")
        again, reused = create(store, "alice")  # a reuse is still found first
        assert reused and again.id == alices.id
    finally:
        locker.execute("ROLLBACK")
    store.finish_job(alices.id, JobState.CANCELLED, now=T0)
    locker.execute("BEGIN IMMEDIATE")
    try:  # a slot is free: the job may be created, which needs the lock
        with pytest.raises(StoreUnavailable, match="locked"):
            create(store, "dave")
    finally:
        locker.execute("ROLLBACK")


@pytest.mark.parametrize("same_targets", [False, True])
def test_a_job_another_connection_creates_after_the_first_read_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, same_targets: bool
) -> None:
    # The read before the write lock saw a free slot; another process then took it (or
    # created the very job): checked again under the lock, it refuses (or reuses) instead.
    path = tmp_path / "jobs.db"
    store, other = Store.open(path), Store.open(path)
    real_read = Store._admission_row
    theirs: list[Any] = []

    def admit_then_race(self: Store, *args: Any, **kw: Any) -> Any:
        answer = real_read(self, *args, **kw)
        if self is store and not theirs:
            theirs.append(create(other, "alice", n=3 if same_targets else 2)[0])
        return answer

    monkeypatch.setattr(Store, "_admission_row", admit_then_race)
    if same_targets:
        job, reused = create(store, "alice", n=3)
        assert reused and job.id == theirs[0].id
    else:
        with pytest.raises(CallerBusy):
            create(store, "alice", n=3)
    assert store.count_live_jobs("alice") == 1


def test_a_create_with_nothing_written_since_its_read_reads_once(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "jobs.db")
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    _, reused = create(store, now=T0 + 1)
    store.db.conn.set_trace_callback(None)
    assert not reused and store.count_live_jobs("alice") == 1
    assert len([sql for sql in statements if "max(expires_at)" in sql]) == 1, statements


def test_a_cap_of_no_live_jobs_refuses_naming_no_job(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "jobs.db")
    with pytest.raises(CallerBusy) as refused:
        create(store, "erin", n=1, jobs_per_caller=0)
    assert refused.value.job_id is None


@pytest.mark.parametrize("cap", [2**63 - 1, 2**63, 10**30])
def test_a_cap_beyond_sqlites_integers_admits_as_any_cap_not_reached(
    tmp_path: Path, cap: int
) -> None:
    # Config takes any non-negative int as a cap; the caps compared in the admission's SQL
    # must not refuse one SQLite cannot bind (OverflowError) where Python's compare admitted.
    store = Store.open(tmp_path / "jobs.db")
    job, reused = create(store, jobs_per_caller=cap, jobs_total=cap)
    assert not reused and store.count_live_jobs("alice") == 1
    again, reused = create(store, "alice", n=2, jobs_per_caller=cap, jobs_total=cap)
    assert not reused and again.id != job.id


def test_open_rejects_unknown_synchronous_mode() -> None:
    with pytest.raises(ValueError, match="synchronous"):
        Store.open(synchronous="OFF; DROP TABLE jobs")


# ---------------------------------------------------------------------------------------------
# Creating jobs: idempotency and caps


def test_create_job_inserts_the_job_and_pending_targets(store: Store) -> None:
    job, reused = create(store)
    assert not reused
    assert len(job.id) == 22 and job.status == JobState.QUEUED
    assert (job.targets_total, job.targets_done, job.expires_at) == (3, 0, T0 + TTL)
    stored = store.get_status(job.id, now=T0)
    assert stored is not None
    assert stored[0] == job
    assert [(t.idx, t.url, t.status) for t in stored[1]] == [
        (i, f"https://example.com/{i}", TargetState.PENDING) for i in range(3)
    ]


def test_the_next_target_of_a_running_job_reads_as_running(store: Store) -> None:
    job, _ = create(store, status=JobState.RUNNING)
    assert job.status == JobState.RUNNING
    assert [t.status for t in targets_of(store, job.id)] == ["running", "pending", "pending"]
    store.record_outcome(job.id, 0, result=Result("a"), ttl=TTL, now=T0)
    assert [t.status for t in targets_of(store, job.id)] == ["done", "running", "pending"]
    # Only "pending", "done" and "failed" are ever written.
    stored = store.db.execute("SELECT DISTINCT status FROM targets ORDER BY status").fetchall()
    assert stored == [("done",), ("pending",)]
    # A queued job, or one no longer running, has no target running.
    queued, _ = create(store, "bob")
    assert [t.status for t in targets_of(store, queued.id)] == ["pending"] * 3
    store.finish_job(job.id, JobState.CANCELLED, now=T0)
    assert [t.status for t in targets_of(store, job.id)] == ["done", "pending", "pending"]


#: URLs whose text JSON spells in every way it can: quotes, backslashes, escapes, non-ASCII.
_ODD_URLS = [
    'https://x.test/"q"',
    "https://x.test/back\\slash\\u0041",
    "https://x.test/ünï/😀/\u2028/\u00a0",
    "https://x.test/" + "long" * 2000,
    "  https://x.test/spaced  ",
    "mailto:{}[],:",
]


def _stored_target_rows(store: Store, job_id: str) -> list[tuple[Any, ...]]:
    return store.db.execute(
        "SELECT * FROM targets WHERE job_id = ? ORDER BY idx", (job_id,)
    ).fetchall()


def test_targets_without_options_are_stored_as_those_with_them_are(store: Store) -> None:
    # Plain targets are inserted from a JSON array of their URLs, the rest row by row; the
    # rows are the same, and every URL comes back as it was given.
    caps = {**CAPS, "targets_per_job": 10, "jobs_per_caller": 2}
    plain, _ = store.create_job(
        NewJob("alice", "user", [Target(u) for u in _ODD_URLS], **caps), now=T0
    )
    spelled = [Target(u, Options() if i else Options(grep="")) for i, u in enumerate(_ODD_URLS)]
    spelled.append(Target("https://x.test/last", custom_id="c"))
    other, _ = store.create_job(NewJob("alice", "user", spelled, **caps), now=T0)
    rows = [row[1:] for row in _stored_target_rows(store, plain.id)]  # all but the job id
    assert rows == [row[1:] for row in _stored_target_rows(store, other.id)][: len(rows)]
    assert [t.url for t in targets_of(store, plain.id)] == _ODD_URLS
    assert [t.options for t in targets_of(store, plain.id)] == [Options()] * len(_ODD_URLS)


@pytest.mark.parametrize("status", [JobState.RUNNING, "running", "queued"])
def test_a_new_jobs_status_may_be_given_as_its_text(store: Store, status: Any) -> None:
    job, _ = create(store, status=status)
    assert job.status is JobState(status)
    assert store.get_job(job.id, now=T0) == job


@pytest.mark.parametrize("status", [JobState.DONE, "cancelled", "nonsense"])
def test_a_new_job_is_never_terminal(store: Store, status: Any) -> None:
    with pytest.raises(ValueError):
        create(store, status=status)
    assert store.list_jobs(now=T0) == []


def test_create_job_stores_options_as_json(store: Store) -> None:
    job, _ = store.create_job(
        NewJob("alice", "user", [Target("u", Options(grep="a.b", context=True))], **CAPS), now=T0
    )
    [target] = targets_of(store, job.id)
    assert target.options == Options(grep="a.b", context=True)
    raw = store.db.execute("SELECT options FROM targets").fetchone()[0]
    assert raw == '{"context":true,"grep":"a.b"}'


def test_same_targets_same_caller_reuse_the_job_within_its_lease(store: Store) -> None:
    job, _ = create(store)
    store.finish_job(job.id, JobState.CANCELLED, now=T0 + 1)  # any status is reused
    again, reused = create(store, now=T0 + TTL - 1)
    assert reused and again.id == job.id and again.status == JobState.CANCELLED
    assert store.db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1
    fresh, reused = create(store, now=T0 + TTL)
    assert not reused and fresh.id != job.id


def test_reuse_is_per_caller(store: Store) -> None:
    job, _ = create(store, "alice")
    other, reused = create(store, "bob")
    assert not reused and other.id != job.id


def test_too_many_targets(store: Store) -> None:
    with pytest.raises(TooManyTargets, match="5 targets; the limit is 4"):
        create(store, n=5)


def test_caller_busy_counts_live_jobs_by_status(store: Store) -> None:
    job, _ = create(store, "alice", n=1)
    with pytest.raises(CallerBusy, match="alice"):
        create(store, "alice", n=2)
    store.finish_job(job.id, JobState.CANCELLED, now=T0)
    _, reused = create(store, "alice", n=2)
    assert not reused


def test_busy_when_all_slots_are_taken(store: Store) -> None:
    for caller in ("a", "b", "c"):
        create(store, caller)
    with pytest.raises(Busy, match="all 3 job slots"):
        create(store, "d")
    assert store.count_live_jobs() == 3
    assert store.count_live_jobs("a") == 1
    assert store.count_live_jobs("d") == 0


def test_reuse_bypasses_the_caps(store: Store) -> None:
    first, _ = create(store, "a")
    create(store, "b")
    create(store, "c")
    again, reused = create(store, "a")
    assert reused and again.id == first.id


def test_invalid_input_is_refused_before_any_write(store: Store) -> None:
    with pytest.raises(InvalidTargets):
        store.create_job(NewJob("alice", "user", [], **CAPS))
    with pytest.raises(InvalidTargets):
        store.create_job(NewJob("alice", "user", ["https://x"], **CAPS))  # type: ignore[list-item]
    with pytest.raises(InvalidRequest):
        store.create_job(NewJob("", "user", targets(1), **CAPS))
    assert store.count_live_jobs() == 0


def test_a_failed_insert_leaves_no_half_created_job(store: Store) -> None:
    store.db.execute(
        "CREATE TRIGGER boom BEFORE INSERT ON targets WHEN NEW.idx = 2 "
        "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
    )
    with pytest.raises(StoreUnavailable, match="disk on fire") as refused:
        create(store)
    assert isinstance(refused.value.__cause__, sqlite3.IntegrityError)
    assert store.db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    assert store.db.execute("SELECT count(*) FROM targets").fetchone()[0] == 0
    assert not store.db.conn.in_transaction


def test_the_cap_race_two_threads_never_exceed_a_cap(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    Store.open(path).close()
    caps = {**CAPS, "jobs_total": 5, "jobs_per_caller": 2}
    accepted: list[str] = []
    refused: list[Exception] = []
    barrier = threading.Barrier(4)

    def submit(worker: int) -> None:
        with Store.open(path, busy_timeout=30) as store:
            barrier.wait()
            for i in range(30):
                caller = f"caller{i % 4}"
                try:
                    job, _ = store.create_job(
                        NewJob(caller, "user", targets(1, f"w{worker}/{i}/"), **caps), now=T0
                    )
                    accepted.append(job.caller)
                except (Busy, CallerBusy) as exc:
                    refused.append(exc)

    threads = [threading.Thread(target=submit, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(accepted) == 5
    assert max(accepted.count(c) for c in set(accepted)) <= 2
    assert len(refused) == 4 * 30 - 5
    with Store.open(path) as store:
        assert store.count_live_jobs() == 5


# ---------------------------------------------------------------------------------------------
# Outcomes, leases and terminal statuses


def test_record_outcome_stores_result_and_bumps_the_lease(store: Store) -> None:
    job, _ = create(store)
    updated = store.record_outcome(job.id, 0, result=Result("body", {"n": 1}), ttl=TTL, now=T0 + 5)
    assert updated is not None
    assert (updated.targets_done, updated.updated_at, updated.expires_at) == (1, T0 + 5, T0 + 105)
    assert updated.status == JobState.QUEUED
    first = targets_of(store, job.id)[0]
    assert first.status == TargetState.DONE
    assert first.result == Result("body", {"n": 1})
    assert first.finished_at == T0 + 5


def test_record_outcome_refuses_to_overwrite(store: Store) -> None:
    job, _ = create(store)
    store.record_outcome(job.id, 0, error="boom", ttl=TTL, now=T0)
    with pytest.raises(OutcomeExists):
        store.record_outcome(job.id, 0, result=Result("x"), ttl=TTL, now=T0)
    with pytest.raises(OutcomeExists):
        store.record_outcome(job.id, 7, result=Result("x"), ttl=TTL, now=T0)
    # The refused writes changed nothing.
    job_now = store.get_job(job.id, now=T0)
    assert job_now is not None and job_now.targets_done == 1
    assert targets_of(store, job.id)[0].error == "boom"


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(set(), JobState.DONE), ({0, 1, 2}, JobState.FAILED), ({1}, JobState.PARTIAL)],
)
def test_last_outcome_sets_the_terminal_status_in_the_same_write(
    store: Store, failures: set[int], expected: JobState
) -> None:
    job, _ = create(store, status=JobState.RUNNING)
    for i in range(3):
        before = store.get_job(job.id, now=T0)
        assert before is not None and before.status == JobState.RUNNING
        if i in failures:
            updated = store.record_outcome(job.id, i, error="e", hint="h", ttl=TTL, now=T0)
        else:
            updated = store.record_outcome(job.id, i, result=Result("ok"), ttl=TTL, now=T0)
    assert updated is not None
    assert updated.status == expected
    assert (updated.targets_done, updated.targets_failed) == (3, len(failures))


def test_an_outcome_can_follow_a_cancel(store: Store) -> None:
    # The target in flight when its job is cancelled still gets its outcome stored.
    job, _ = create(store, status=JobState.RUNNING)
    store.finish_job(job.id, JobState.CANCELLED, now=T0)
    updated = store.record_outcome(job.id, 0, result=Result("b"), ttl=TTL, now=T0)
    assert updated is not None and updated.status == JobState.CANCELLED
    assert [t.status for t in targets_of(store, job.id)] == ["done", "pending", "pending"]


def test_the_last_outcome_after_a_cancel_keeps_the_job_cancelled(store: Store) -> None:
    job, _ = create(store, n=2, status=JobState.RUNNING)
    store.record_outcome(job.id, 0, result=Result("a"), ttl=TTL, now=T0)
    store.finish_job(job.id, JobState.CANCELLED, now=T0)
    updated = store.record_outcome(job.id, 1, error="late", ttl=TTL, now=T0)
    assert updated is not None
    assert (updated.status, updated.targets_done, updated.targets_failed) == (
        JobState.CANCELLED,
        2,
        1,
    )
    assert store.get_job(job.id, now=T0) == updated


def _cancelled(store: Store, job: Job) -> None:
    store.finish_job(job.id, JobState.CANCELLED, now=T0)


def _failed(store: Store, job: Job) -> None:
    store.finish_job(job.id, JobState.FAILED, error="stop", now=T0)


def _counted(store: Store, job: Job) -> None:
    store.record_outcome(job.id, 2, error="elsewhere", ttl=TTL, now=T0)


def _purged(store: Store, job: Job) -> None:
    store.purge_expired(T0 + 2 * TTL)


@pytest.mark.parametrize(
    "change",
    [_cancelled, _failed, _counted, _purged],
    ids=["cancelled", "failed with an error", "counted", "purged"],
)
def test_a_write_answers_the_job_as_stored_after_a_change_elsewhere(
    store: Store, change: Any
) -> None:
    seen, _ = create(store, status=JobState.RUNNING)
    change(store, seen)
    now = T0 + 2 * TTL if change is _purged else T0 + 1
    fresh = store.get_job(seen.id, now=now)
    try:
        answer = store.record_outcome(seen.id, 0, result=Result("r"), ttl=TTL, now=now)
    except OutcomeExists:
        pytest.fail("target 0 had no outcome")
    if fresh is None:
        assert answer is None
        return
    assert answer == store.get_job(seen.id, now=now)
    assert answer is not None and answer.targets_done == fresh.targets_done + 1
    assert answer.status == fresh.status and answer.error == fresh.error


def test_targets_read_differently_each_time_are_stored_as_checked(store: Store) -> None:
    # The check read the targets once, the insert again: a target's options were dropped
    # when the first read had none, and the key was of other targets than those stored.
    given = Shifting(WITH_OPTIONS, PLAIN)
    job, _ = store.create_job(NewJob("alice", "user", given, status=JobState.RUNNING, **CAPS))
    assert [t.options for t in targets_of(store, job.id)] == [WITH_OPTIONS[0].options]
    assert job.idem_key == idem_key("alice", WITH_OPTIONS)


def test_a_refused_write_changes_nothing(store: Store) -> None:
    job, _ = create(store, status=JobState.RUNNING)
    seen = store.record_outcome(job.id, 0, result=Result("a"), ttl=TTL, now=T0)
    assert seen is not None
    with pytest.raises(OutcomeExists):
        store.record_outcome(job.id, 0, error="again", ttl=TTL, now=T0 + 1)
    assert store.get_job(job.id, now=T0 + 1) == seen  # the bump was rolled back with it


def test_a_result_that_is_not_json_is_stored_as_a_failure(store: Store) -> None:
    job, _ = create(store)
    store.record_outcome(job.id, 0, result=Result("c", {"s": {1}}), ttl=TTL, now=T0)
    target = targets_of(store, job.id)[0]
    assert target.status == TargetState.FAILED
    assert target.error is not None and "cannot be stored as JSON" in target.error
    assert target.hint is not None


def test_record_outcome_on_a_lapsed_job_writes_nothing(store: Store) -> None:
    job, _ = create(store)
    assert store.record_outcome(job.id, 0, result=Result("x"), ttl=TTL, now=T0 + TTL) is None
    assert targets_of(store, job.id)[0].status == TargetState.PENDING


def test_finish_job_sets_a_terminal_status_exactly_once(store: Store) -> None:
    job, _ = create(store, status=JobState.RUNNING)
    done = store.finish_job(job.id, JobState.CANCELLED, now=T0 + 1)
    assert done is not None and done.status == JobState.CANCELLED
    assert store.finish_job(job.id, JobState.FAILED, error="late", now=T0 + 2) is None
    after = store.get_job(job.id, now=T0)
    assert after is not None and (after.status, after.error) == (JobState.CANCELLED, None)


@pytest.mark.parametrize("bad_id", ["", "nope", "x" * 22, "'; DROP TABLE jobs; --", "a" * 10_000])
def test_bad_ids_read_as_absent(store: Store, bad_id: str) -> None:
    create(store)
    assert store.get_job(bad_id) is None
    assert store.get_status(bad_id) is None
    assert store.finish_job(bad_id, JobState.CANCELLED) is None
    assert store.db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1


def test_mark_in_flight_failed_fails_live_jobs_and_keeps_outcomes(store: Store) -> None:
    running, _ = create(store, "a", status=JobState.RUNNING)
    queued, _ = create(store, "b")
    finished, _ = create(store, "c", n=1)
    store.record_outcome(running.id, 0, result=Result("kept"), ttl=TTL, now=T0)
    assert [t.status for t in targets_of(store, running.id)] == ["done", "running", "pending"]
    store.record_outcome(finished.id, 0, result=Result("x"), ttl=TTL, now=T0)
    assert store.mark_in_flight_failed("restart", now=T0 + 1) == 2
    for job_id in (running.id, queued.id):
        job = store.get_job(job_id, now=T0)
        assert job is not None and (job.status, job.error) == (JobState.FAILED, "restart")
    status = store.get_status(running.id, now=T0)
    assert status is not None
    assert [t.status for t in status[1]] == ["done", "pending", "pending"]
    assert status[1][0].result == Result("kept")
    unchanged = store.get_job(finished.id, now=T0)
    assert unchanged is not None and unchanged.status == JobState.DONE
    assert store.mark_in_flight_failed("restart", now=T0 + 2) == 0


def test_lapsed_jobs_read_as_absent_before_purge(store: Store) -> None:
    job, _ = create(store)
    assert store.get_job(job.id, now=T0 + TTL - 0.001) is not None
    assert store.get_job(job.id, now=T0 + TTL) is None
    assert store.get_status(job.id, now=T0 + TTL) is None
    assert store.list_jobs(now=T0 + TTL) == []


def test_purge_expired_deletes_lapsed_jobs_in_batches(store: Store) -> None:
    kept, _ = create(store, "kept", now=T0 + 50)
    for i in range(7):
        create(store, f"old{i}", now=T0 - i)
        store.mark_in_flight_failed("x", now=T0)  # free the caps for the next one
    assert store.purge_expired(T0 + TTL, batch_size=3, max_batches=1) == 3
    assert store.purge_expired(T0 + TTL, batch_size=3) == 4
    assert store.purge_expired(T0 + TTL, batch_size=3) == 0
    assert [j.id for j in store.list_jobs(now=T0)] == [kept.id]
    assert store.db.execute("SELECT count(*) FROM targets").fetchone()[0] == 3
    assert store.db.execute("PRAGMA foreign_key_check").fetchall() == []


def test_the_overview_reads_no_result_and_one_target_reads_one(store: Store) -> None:
    job, _ = create(store, "a", status=JobState.RUNNING)
    store.record_outcome(job.id, 0, result=Result("r" * 1000), ttl=TTL, now=T0)
    found = job_overview(store, job.id, now=T0)
    assert found is not None
    _, targets, sizes = found
    assert [t.result for t in targets] == [None, None, None]
    assert [str(t.status) for t in targets] == ["done", "running", "pending"]
    assert sizes[0] > 1000 and sizes[1:] == [0, 0]
    one = one_target(store, job.id, 0, now=T0)
    assert one is not None and one[1].result == Result("r" * 1000)
    running = one_target(store, job.id, 1, now=T0)
    assert running is not None and str(running[1].status) == "running"  # due next
    assert one_target(store, job.id, 3, now=T0) is None
    assert one_target(store, "nope", 0, now=T0) is None
    assert job_overview(store, job.id, now=T0 + TTL) is None  # lapsed


def test_list_jobs_filters_by_caller(store: Store) -> None:
    a, _ = create(store, "a")
    b, _ = create(store, "b", now=T0 + 1)
    assert [j.id for j in store.list_jobs(now=T0)] == [b.id, a.id]
    assert [j.id for j in store.list_jobs(caller="a", now=T0)] == [a.id]


# ---------------------------------------------------------------------------------------------
# Every query the store runs uses an index

# A scan of a partial index only visits the rows it holds; there is none so far.
PARTIAL_INDEXES: set[str] = set()
QUERY_VERBS = ("SELECT", "UPDATE", "DELETE", "INSERT")


# The metrics counts (Store.counts) read every unexpired job: a scan of jobs_status, by design
# for now (see the report of issue 13); not exercised here. The version 2 migration visits
# every stored target once, when an old database is first opened (test_schema_migration).
UNCHECKED_QUERIES = {"COUNT_BY_STATUS", "SUM_TARGETS", "MIGRATE_V2_ATTEMPTS"}


def _exercise_every_method(store: Store) -> None:
    job, _ = create(store, "a", status=JobState.RUNNING)
    create(store, "a")  # reused
    with pytest.raises(CallerBusy) as busy:
        create(store, "a", n=2)  # a's one live job is in the way
    assert busy.value.job_id == job.id
    other, _ = create(store, "b", metadata={"team": "x", "k": "v"})  # with labels
    store.record_outcome(job.id, 0, result=Result("x"), ttl=TTL, now=T0)
    store.record_outcomes([OutcomeWrite(job.id, 1, error="e")], ttl=TTL, now=T0)
    # Two writes share a commit (savepoints); the last outcome sets the terminal status.
    store.record_outcomes(
        [OutcomeWrite(job.id, 2, result=Result("y")), OutcomeWrite(job.id, 2, error="again")],
        ttl=TTL,
        now=T0,
    )
    store.finish_job(other.id, JobState.CANCELLED, now=T0)
    store.get_status(job.id, now=T0)
    store.get_job(job.id, now=T0)
    job_overview(store, job.id, now=T0)
    one_target(store, job.id, 1, now=T0)
    store.list_jobs(now=T0)
    store.list_jobs(caller="a", now=T0)
    store.count_live_jobs()
    store.count_live_jobs("a")
    store.list_caller_jobs("a", now=T0, limit=10)
    store.list_caller_jobs("a", now=T0, limit=10, before=(T0 + 1, job.id))
    # Filtered lists, by status and by labels (one driving the read, one more checked).
    store.list_caller_jobs("b", now=T0, limit=10, where=JobFilter(statuses=frozenset(JobState)))
    labels = JobFilter(
        statuses=frozenset({JobState.CANCELLED}),
        labels=(("team", "x"), ("k", "v")),
        created_after=0,
    )
    store.list_caller_jobs("b", now=T0, limit=10, before=(T0 + 1, other.id), where=labels)
    targets_after(store, job.id, 0, now=T0, limit=2)
    latest_retry(store, job.id, "a", now=T0)
    store.forget_job(other.id, now=T0)
    hooked, _ = create(store, "c", webhook_url="https://example.org/hook")
    # Targets with options or custom ids are inserted row by row; plain ones all at once.
    store.create_job(NewJob("d", "user", [Target("https://e.test", custom_id="x")], **CAPS), now=T0)
    store.mark_in_flight_failed("restart", now=T0)
    event = _outbox.claim_delivery(store, "me", now=T0, lease=60)
    assert event is not None and event.job_id == hooked.id
    _outbox.record_delivery(
        store, event, "me", answer="HTTP 500", delivered=False, now=T0, next_at=T0 + 5
    )
    _outbox.next_due(store)
    _outbox.get_delivery(store, hooked.id, now=T0)
    _outbox.redeliver(store, hooked.id, now=T0)
    store.purge_expired(T0 + TTL)


def assert_uses_an_index(store: Store, sql: str) -> None:
    plan = [row[3] for row in store.db.execute(f"EXPLAIN QUERY PLAN {sql}")]
    for step in plan:
        words = step.split()
        # A subquery's own rows (a co-routine of one row, say) are no table, nor is a pragma's.
        if (
            words[0] != "SCAN"
            or words[1] in ("json_each", "pragma_data_version")
            or words[1].startswith("(subquery-")
        ):
            continue
        assert "INDEX" in words, f"full table scan in {sql!r}: {plan}"
        index_name = words[words.index("INDEX") + 1]
        assert index_name in PARTIAL_INDEXES, f"full index scan in {sql!r}: {plan}"


def test_every_store_query_uses_an_index(store: Store) -> None:
    # Record every statement the connection itself runs, whether through sqlite-utils or
    # straight on sqlite3 (the hot outcome updates and the bulk target insert), with its
    # parameters bound into the text, then ask SQLite for each plan.
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    try:
        _exercise_every_method(store)
    finally:
        store.db.conn.set_trace_callback(None)
    queries = {sql for sql in statements if sql.split()[0].upper() in QUERY_VERBS}
    for hot in ("INSERT INTO targets", "UPDATE targets SET", "UPDATE jobs SET targets_done"):
        assert any(sql.startswith(hot) for sql in queries), f"{hot!r} was never traced"
    # The exercise reached every named query (outcome writes and status reads included): the
    # text before a statement's first parameter (``?`` or ``:name``) starts what was traced.
    named = {
        name: sql
        for name, sql in vars(q).items()
        if name.isupper()
        and isinstance(sql, str)
        and sql.split()[0] in QUERY_VERBS
        and name not in UNCHECKED_QUERIES
    }
    missed = [
        name
        for name, sql in named.items()
        if not any(traced.startswith(re.split(r"\?|:[a-z_]", sql)[0]) for traced in queries)
    ]
    assert len(named) >= 12
    assert not missed
    for sql in queries:
        assert_uses_an_index(store, sql)


@pytest.mark.parametrize(
    "sql", ["SELECT * FROM jobs WHERE error = 'x'", "SELECT count(*) FROM targets"]
)
def test_the_index_check_catches_scans(store: Store, sql: str) -> None:
    with pytest.raises(AssertionError, match=r"full (table|index) scan"):
        assert_uses_an_index(store, sql)


def test_a_refused_write_in_a_group_commit_writes_nothing_and_the_others_are_stored(
    store: Store,
) -> None:
    job, _ = create(store, "a", status=JobState.RUNNING)
    lapsed, _ = create(store, "b", status=JobState.RUNNING, ttl=1.0)
    store.record_outcome(job.id, 0, result=Result("first"), ttl=TTL, now=T0)
    answers = store.record_outcomes(
        [
            OutcomeWrite(job.id, 0, error="again"),  # already stored: refused
            OutcomeWrite(lapsed.id, 0, result=Result("late")),  # lease lapsed: None
            OutcomeWrite(job.id, 1, result=Result("second")),
        ],
        ttl=TTL,
        now=T0 + 2.0,
    )
    assert isinstance(answers[0], OutcomeExists)
    assert answers[1] is None
    stored = answers[2]
    assert isinstance(stored, Job) and stored.targets_done == 2  # the refusal bumped nothing
    got = store.get_status(job.id, now=T0 + 2.0)
    assert got is not None
    assert [t.result.content if t.result else t.error for t in got[1]] == ["first", "second", None]
    left = store.db.execute(
        "SELECT status, result FROM targets WHERE job_id = ? AND idx = 0", (lapsed.id,)
    ).fetchone()
    assert left == ("pending", None)
    assert store.db.execute(
        "SELECT targets_done FROM jobs WHERE id = ?", (lapsed.id,)
    ).fetchone() == (0,)
