"""Databases written by earlier versions open, upgraded in place, with nothing lost.

``tests/data/schema_v1.sqlite`` was written by trio_batch 0.1.0 (schema version 1): one job of
three targets, the first done, the second failed, then the job cancelled with the third pending.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from trio_batch import SCHEMA_VERSION, JobState, Result, Store, Target, TargetState
from trio_batch.store import NewJob

V1 = Path(__file__).parents[1] / "support" / "data" / "schema_v1.sqlite"
V1_JOB = "XtVkK7lhelZUb9pqy9lv1w"
T0 = 1_700_000_000.0


@pytest.fixture
def v1_copy(tmp_path: Path) -> Path:
    path = tmp_path / "old.db"
    shutil.copyfile(V1, path)
    return path


def _user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def test_the_fixture_is_a_version_1_database(v1_copy: Path) -> None:
    # Read through a copy: the file is in WAL mode, and reading it would leave -wal and -shm
    # files beside the fixture.
    assert _user_version(v1_copy) == 1


def test_a_version_1_database_is_upgraded_in_place_and_keeps_its_jobs(v1_copy: Path) -> None:
    with Store.open(v1_copy) as store:
        found = store.get_status(V1_JOB, now=T0 + 10)
    assert found is not None
    job, targets = found
    assert (job.status, job.targets_done, job.targets_failed) == (JobState.CANCELLED, 2, 1)
    assert [t.status for t in targets] == [
        TargetState.DONE,
        TargetState.FAILED,
        TargetState.PENDING,
    ]
    assert targets[0].result == Result("page a", {"status": 200})
    assert (targets[1].error, targets[1].hint) == ("NetworkError: refused", "is the server up?")
    assert targets[1].options.grep == "x"
    # Outcomes stored before retries existed took one attempt; a pending target has none.
    assert [t.attempts for t in targets] == [1, 1, 0]
    assert _user_version(v1_copy) == SCHEMA_VERSION == 6


def test_an_upgraded_database_takes_new_jobs_with_attempts(v1_copy: Path) -> None:
    with Store.open(v1_copy) as store:
        job, _ = store.create_job(
            NewJob(
                "bob",
                "default",
                [Target("https://example.org/new")],
                ttl=100,
                targets_per_job=4,
                jobs_per_caller=1,
                jobs_total=4,
            ),
            now=T0,
        )
        store.record_outcome(job.id, 0, error="timeout", attempts=3, ttl=100, now=T0 + 1)
        found = store.get_status(job.id, now=T0 + 2)
    assert found is not None and found[1][0].attempts == 3
    # Opening again is a no-op: already at the current version.
    with Store.open(v1_copy) as store:
        assert store.get_job(V1_JOB, now=T0) is not None
    assert _user_version(v1_copy) == SCHEMA_VERSION


def test_an_upgraded_database_has_the_batch_data_columns_and_indexes(v1_copy: Path) -> None:
    with Store.open(v1_copy):
        pass
    with sqlite3.connect(v1_copy) as conn:
        jobs = {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
        targets = {row[1] for row in conn.execute("PRAGMA table_info(targets)")}
        labels = {row[1] for row in conn.execute("PRAGMA table_info(job_labels)")}
        indexes = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
        old = conn.execute(
            "SELECT metadata, parent_id FROM jobs WHERE id = ?", (V1_JOB,)
        ).fetchone()
        custom = conn.execute(
            "SELECT custom_id FROM targets WHERE job_id = ?", (V1_JOB,)
        ).fetchall()
    assert {"metadata", "parent_id"} <= jobs
    assert "custom_id" in targets
    assert labels == {"job_id", "caller", "key", "value", "created_at"}
    assert {
        "job_labels_filter",
        "jobs_caller_created",
        "jobs_caller_status_created",
        "jobs_parent",
    } <= indexes
    # A job stored before version 3 has no metadata, parent or custom ids; before version 5
    # no trace context.
    assert old == ("{}", None)
    assert "trace_context" in jobs
    with sqlite3.connect(v1_copy) as conn:
        assert conn.execute("SELECT trace_context FROM jobs").fetchall() == [(None,)]
    assert custom == [(None,), (None,), (None,)]
