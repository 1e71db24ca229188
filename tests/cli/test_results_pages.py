"""``trio-batch results JOB`` and ``status JOB`` read the job a page at a time, pages bounded
by their results' size as an export's are: they read the whole job at once (64 results of
10 MB: 640 MB held to print them, or to show a line of each). Their output is what it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trio_batch.runner._batch_ops
from trio_batch import JobState, Result, Store, Target
from trio_batch._text import printable_json
from trio_batch.cli import main
from trio_batch.store import NewJob
from trio_batch.store.sqlite._job_store import SQLiteJobStore

from .test_cli import db

__all__ = ["db"]  # the fixture, imported for pytest

BOUND = 10_000  # three of the results below fit under it, a fourth does not
TARGETS = 8


@pytest.fixture
def job(db: Path) -> str:
    """A finished job of eight results of 4,000 characters, the last target failed."""
    with Store.open(db) as store:
        targets = [Target(f"https://example.test/{i}") for i in range(TARGETS)]
        new = NewJob(
            "me", "cli", targets, ttl=3600, targets_per_job=TARGETS, jobs_per_caller=1,
            jobs_total=1, status=JobState.RUNNING,
        )  # fmt: skip
        made = store.create_job(new)[0].id
        for i in range(TARGETS - 1):
            store.record_outcome(made, i, result=Result(chr(97 + i) * 4000, {"i": i}), ttl=3600)
        store.record_outcome(made, TARGETS - 1, error="NetworkError: refused", ttl=3600)
    return made


@pytest.fixture
def pages(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Each page of targets the store returns, as its results' sizes; no whole-job read."""
    read: list[list[int]] = []
    real = SQLiteJobStore.get_targets_after

    async def recorded(self: SQLiteJobStore, *args: Any, **kwargs: Any) -> Any:
        found = await real(self, *args, **kwargs)
        if found is not None:
            read.append([len(t.result.to_json_text()) if t.result else 0 for t in found[1]])
        return found

    async def whole(self: SQLiteJobStore, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole job was read at once")

    monkeypatch.setattr(SQLiteJobStore, "get_targets_after", recorded)
    monkeypatch.setattr(SQLiteJobStore, "get_status", whole)
    monkeypatch.setattr(trio_batch.runner._batch_ops, "EXPORT_PAGE_BYTES", BOUND)
    return read


def _bounded(pages: list[list[int]]) -> None:
    assert [len(p) for p in pages] == [3, 3, 2, 0]  # the last, empty, says there is no more
    assert all(sum(p[:-1]) < BOUND for p in pages)


def test_results_as_json_are_read_in_pages(
    db: Path, job: str, pages: list[list[int]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["results", job, "--db", str(db), "--json"]) == 0
    out = capsys.readouterr().out
    _bounded(pages)
    with Store.open(db) as store:
        found = store.get_status(job)
    assert found is not None
    whole = {"job": found[0].to_json(), "targets": [t.to_json() for t in found[1]]}
    # Exactly the document the whole job made, written a target at a time.
    assert out == printable_json(json.dumps(whole, ensure_ascii=False, indent=2)) + "\n"


def test_results_as_text_are_read_in_pages(
    db: Path, job: str, pages: list[list[int]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["results", job, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    _bounded(pages)
    headers = [line for line in out.splitlines() if line.startswith("== [")]
    assert [h.split("]")[0] for h in headers] == [f"== [{i}" for i in range(TARGETS)]
    assert all(chr(97 + i) * 4000 in out for i in range(TARGETS - 1))
    assert "NetworkError: refused" in out


def test_status_reads_the_job_in_pages_and_keeps_a_line_of_each_result(
    db: Path, job: str, pages: list[list[int]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", job, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    _bounded(pages)
    assert out.count("4000 chars") == TARGETS - 1  # each result's size, as before
    for i in range(TARGETS - 1):
        assert chr(97 + i) * 20 in out and chr(97 + i) * 4000 not in out  # a line of it
    assert "NetworkError: refused" in out and job in out


def test_runs_report_reads_the_job_in_pages(
    db: Path, tmp_path: Path, pages: list[list[int]], capsys: pytest.CaptureFixture[str]
) -> None:
    # Its table shows a line of each result: the whole job was read for it.
    files = []
    for i in range(TARGETS):
        path = tmp_path / f"page{i}.txt"
        path.write_text(chr(97 + i) * 4000)
        files.append(path.as_uri())
    batch = tmp_path / "urls.txt"
    batch.write_text("\n".join(files) + "\n")
    assert main(["run", str(batch), "-q", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert len(pages) >= 2 and all(sum(p[:-1]) < BOUND for p in pages), pages
    assert sum(len(p) for p in pages) == TARGETS
    assert all(chr(97 + i) * 20 in out for i in range(TARGETS))
    assert f"{TARGETS} done, 0 failed" in out
