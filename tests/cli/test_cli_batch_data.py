"""``trio-batch run`` of JSON Lines with custom ids, ``export`` and ``jobs`` filters, as a
user runs them: real processes against a local server."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from trio_batch import JobState, Store, Target
from trio_batch.store import NewJob

from ..support.local_server import LocalServer, server
from .test_cli import cli, db, write_batch

__all__ = ["db", "server"]  # the fixtures, imported for pytest


def test_run_takes_jsonl_with_custom_ids_and_export_writes_them_back(
    server: LocalServer, tmp_path: Path, db: Path
) -> None:
    batch = write_batch(
        tmp_path / "batch.jsonl",
        [
            {"url": server.url("/text.txt"), "custom_id": "first"},
            {"url": server.url("/missing-page"), "custom_id": "second"},
        ],
    )
    proc = cli("run", str(batch), "--db", str(db), "--json", "--caller", "me")
    assert proc.returncode in (0, 1), proc.stderr
    job_id = json.loads(proc.stdout)["job"]["id"]
    out = cli("export", job_id, "--db", str(db))
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(x["idx"], x["custom_id"]) for x in lines] == [(0, "first"), (1, "second")]
    assert "result" in lines[0] or "error" in lines[0]
    target = tmp_path / "out.jsonl"
    assert cli("export", job_id, "--db", str(db), "-o", str(target), "--after", "0").returncode == 0
    assert [json.loads(x)["idx"] for x in target.read_text().splitlines()] == [1]
    missing = cli("export", "A" * 22, "--db", str(db), "-o", str(tmp_path / "none.jsonl"))
    assert missing.returncode == 1 and "no job" in missing.stderr
    assert not (tmp_path / "none.jsonl").exists()


def test_a_repeated_custom_id_is_refused_as_file_line(tmp_path: Path, db: Path) -> None:
    batch = write_batch(
        tmp_path / "batch.jsonl",
        [
            {"url": "https://example.test/a", "custom_id": "x"},
            "# a comment",
            {"url": "https://example.test/b", "custom_id": "x"},
        ],
    )
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert f"{batch}:3:" in proc.stderr and "custom_id 'x' of line 1" in proc.stderr
    assert not db.exists()


def test_jobs_filters_list_one_callers_jobs_by_status_and_label(tmp_path: Path, db: Path) -> None:
    with Store.open(db) as store:
        made = {}
        for i, (caller, run) in enumerate(
            [("me", "nightly"), ("me", "adhoc"), ("you", "nightly"), ("me", "nightly")]
        ):
            new = NewJob(
                caller,
                "user",
                [Target(f"https://example.test/{i}")],
                ttl=3600,
                targets_per_job=4,
                jobs_per_caller=9,
                jobs_total=9,
                metadata={"run": run},
            )
            made[i] = store.create_job(new)[0].id
        store.finish_job(made[3], JobState.CANCELLED)
    proc = cli("jobs", "--db", str(db), "--caller", "me", "--label", "run:nightly", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [j["id"] for j in json.loads(proc.stdout)] == [made[3], made[0]]
    proc = cli("jobs", "--db", str(db), "--caller", "me", "--status", "cancelled", "--json")
    assert [j["id"] for j in json.loads(proc.stdout)] == [made[3]]
    assert json.loads(proc.stdout)[0]["metadata"] == {"run": "nightly"}
    bad = cli("jobs", "--db", str(db), "--label", "novalue")
    assert bad.returncode == 2 and "a label filter is key:value" in bad.stderr


def test_jobs_created_after_takes_the_services_times_and_refuses_others(db: Path) -> None:
    with Store.open(db) as store:
        targets = [Target("https://example.test/")]
        new = NewJob(
            "me", "user", targets, ttl=3600, targets_per_job=4, jobs_per_caller=4, jobs_total=4
        )
        job = store.create_job(new)[0]
    before = datetime.datetime.fromtimestamp(job.created_at - 60, datetime.UTC)
    for when in (str(job.created_at - 60), before.isoformat(), before.strftime("%Y-%m-%dT%H:%M")):
        proc = cli("jobs", "--db", str(db), "--caller", "me", "--created-after", when, "--json")
        assert proc.returncode == 0, proc.stderr
        assert [j["id"] for j in json.loads(proc.stdout)] == [job.id], when
    # NaN, infinity and numbers past the year 9999 once passed as a float and listed nothing.
    for bad in ("nan", "inf", "1e400", "-5", "soon"):
        proc = cli("jobs", "--db", str(db), "--created-after", bad)
        assert proc.returncode == 2, bad
        assert "created_after must be epoch seconds" in proc.stderr, proc.stderr


def test_retry_fetches_a_restart_killed_jobs_unfinished_targets_and_export_merges(
    server: LocalServer, db: Path
) -> None:
    # A job a dead run left running: its first target stored, the others never fetched.
    targets = [
        Target(server.url("/text.txt"), custom_id="one"),
        Target(server.url("/text.txt?2"), custom_id="two"),
        Target(server.url("/text.txt?3"), custom_id="three"),
    ]
    with Store.open(db) as store:
        new = NewJob(
            "me",
            "cli",
            targets,
            ttl=3600,
            targets_per_job=4,
            jobs_per_caller=1,
            jobs_total=4,
            status=JobState.RUNNING,
            metadata={"run": "nightly"},
        )
        parent = store.create_job(new)[0].id
        store.record_outcome(parent, 0, error="NetworkError: refused", ttl=3600)
    proc = cli("retry", parent, "--db", str(db), "--only", "failed,pending", "--json", "-q")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["job"]["parent_id"] == parent and out["job"]["metadata"] == {"run": "nightly"}
    assert [t["custom_id"] for t in out["targets"]] == ["one", "two", "three"]
    assert {t["status"] for t in out["targets"]} == {"done"}
    with Store.open(db) as store:
        old = store.get_job(parent)
    assert old is not None and (old.status, old.error) == (JobState.FAILED, "restart")
    merged = cli("export", parent, "--db", str(db), "--merged")
    lines = [json.loads(line) for line in merged.stdout.splitlines()]
    assert [(x["custom_id"], x["status"], x["job_id"]) for x in lines] == [
        ("one", "done", out["job"]["id"]),
        ("two", "done", out["job"]["id"]),
        ("three", "done", out["job"]["id"]),
    ]
    again = cli("retry", parent, "--db", str(db), "--only", "everything")
    assert again.returncode == 2 and "only" in again.stderr


def test_retry_takes_no_caller_class_or_size_of_its_own(db: Path) -> None:
    # A retry is the parent's caller's and class's job: options it would ignore are refused.
    for option in (["--caller", "bob"], ["--class", "vip"], ["--max-targets", "5"]):
        proc = cli("retry", "job_x", "--db", str(db), *option)
        assert proc.returncode == 2, option
        assert "unrecognized arguments" in proc.stderr
