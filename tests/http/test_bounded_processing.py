"""Body processing runs where it can be bounded and killed: a costly regex or jq program fails
its own target with a hint, and never holds the event loop (issue 12, item 1)."""

from __future__ import annotations

import pickle
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from trio_batch import Target
from trio_batch._model import Options
from trio_batch.fetchers import ContentError, HttpFetcher, HTTPStatusError
from trio_batch.fetchers._body import Body
from trio_batch.fetchers._bounded import needs_worker
from trio_batch.fetchers._options import Plan

from ..support.http_fixtures import ALICE, sse_events, start_server

CATASTROPHIC_GREP = "(.+)+Z"  # exponential backtracking on a line without a Z


def _line_file(tmp_path: Path) -> Path:
    path = tmp_path / "line.txt"
    path.write_text("a" * 27 + "\n")
    return path


@pytest.mark.parametrize(
    ("options", "body"),
    [
        ({"grep": CATASTROPHIC_GREP}, "a" * 27 + "\n"),
        ({"jq": "last(range(20000000000))"}, "1"),
    ],
)
async def test_a_costly_pattern_fails_its_target_with_a_hint(
    tmp_path: Path, options: dict[str, str], body: str
) -> None:
    path = tmp_path / "body.json"
    path.write_text(body)
    fetcher = HttpFetcher(process_timeout=1)
    with pytest.raises(ContentError) as info:
        await fetcher(Target(path.as_uri(), Options(**options)))  # type: ignore[arg-type]
    assert "took longer than 1 s and was stopped" in str(info.value)
    assert "nested repeats" in info.value.hint


async def test_processing_past_the_memory_limit_fails_its_target(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text("1")
    fetcher = HttpFetcher(process_timeout=60, process_memory=64 * 1024 * 1024)
    with pytest.raises(ContentError) as info:
        await fetcher(Target(path.as_uri(), Options(jq="[range(50000000)] | length")))
    assert "memory" in str(info.value)
    assert info.value.hint


async def test_the_worker_serves_the_next_target_after_one_was_killed(tmp_path: Path) -> None:
    path = _line_file(tmp_path)
    fetcher = HttpFetcher(process_timeout=1)
    with pytest.raises(ContentError):
        await fetcher(Target(path.as_uri(), Options(grep=CATASTROPHIC_GREP)))
    # The next target goes to a fresh worker, whose start on a loaded machine may take longer
    # than 1 s: it gets a deadline that only a hang would reach.
    fetcher.process_timeout = 120
    result = await fetcher(Target(path.as_uri(), Options(grep="a+")))
    assert result.content == "a" * 27 and result.meta["matches"] == 1


def test_only_bodies_with_processing_to_do_go_to_a_worker() -> None:
    text = Body("file:///x", None, "text/plain", None, b"hello", 0)
    pdf = Body("file:///x.pdf", None, "application/pdf", None, b"%PDF-1.4", 0)
    assert not needs_worker(Plan.from_options(Options()), text)
    assert needs_worker(Plan.from_options(Options(grep="h")), text)
    assert needs_worker(Plan.from_options(Options(jq=".")), text)
    assert needs_worker(Plan.from_options(Options(mode="text")), text)
    assert needs_worker(Plan.from_options(Options()), pdf)


def test_fetch_errors_cross_a_process_boundary_whole() -> None:
    err = HTTPStatusError("HTTP 404 from x", status_code=404, hint="check the URL")
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.status_code, back.hint) == (
        HTTPStatusError,
        "HTTP 404 from x",
        404,
        "check the URL",
    )
    content = pickle.loads(pickle.dumps(ContentError("bad", hint="do this")))
    assert (str(content), content.hint) == ("bad", "do this")


@asynccontextmanager
async def burning_job(
    tmp_path: Path, *serve_args: str
) -> AsyncIterator[tuple[subprocess.Popen[str], httpx.AsyncClient, str]]:
    """``trio-batch serve`` (built-in fetcher, file URLs allowed) running one job whose grep
    backtracks for about a minute; yields the process, a client as alice, and the job id."""
    path = tmp_path / "line.txt"
    path.write_text("a" * 30 + "\n")
    proc, url = start_server(tmp_path, "--allow-file", *serve_args, fetch=None)
    headers = {"Authorization": f"Bearer {ALICE}"}
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as client:
            target = {"url": path.as_uri(), "options": {"grep": CATASTROPHIC_GREP}}
            r = await client.post("/v1/batches", json={"targets": [target]})
            assert r.status_code == 201
            yield proc, client, r.json()["id"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


async def events_of(client: httpx.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    async with client.stream("GET", f"/v1/batches/{job_id}/events") as stream:
        return [e async for e in sse_events(stream)]


async def test_the_service_stays_responsive_while_a_regex_burns(tmp_path: Path) -> None:
    # 2 s of burning: time enough for two requests answered while it lasts.
    async with burning_job(tmp_path, "--process-timeout", "2") as (proc, client, job_id):
        health = await client.get("/healthz")
        assert health.status_code == 200
        # /healthz answered while the regex was still burning: the job is not finished.
        during = (await client.get(f"/v1/batches/{job_id}")).json()
        assert during["status"] == "running"
        events = await events_of(client, job_id)
        target = next(e["data"] for e in events if e["event"] == "target")
        assert target["status"] == "failed"
        assert target["error"].startswith("ContentError: processing")
        assert "took longer than 2 s" in target["error"]
        assert "nested repeats" in target["hint"]
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr


async def test_sigterm_during_a_burning_regex_stops_at_once(tmp_path: Path) -> None:
    """SIGTERM was acted on 25 s late, after the regex (issue 12): now the worker is killed."""
    from trio_batch import JobState, Store

    async with burning_job(tmp_path, "--process-timeout", "280") as (proc, client, job_id):
        assert (await client.get(f"/v1/batches/{job_id}")).json()["status"] == "running"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
    with Store.open(tmp_path / "jobs.db") as store:
        found = store.get_status(job_id)
    assert found is not None
    job, targets = found
    # Stopped by the shutdown, not after the regex ran its course (it would be "done").
    assert (job.status, job.error) == (JobState.FAILED, "shutdown")
    assert str(targets[0].status) == "pending"


async def test_a_cancel_cuts_a_burning_target_after_the_grace(tmp_path: Path) -> None:
    """A cancel answered 200 while the regex kept burning (issue 12): serve's --cancel-grace
    cuts the target in flight and kills its worker."""
    serve_args = ("--process-timeout", "280", "--cancel-grace", "1")
    async with burning_job(tmp_path, *serve_args) as (_, client, job_id):
        r = await client.post(f"/v1/batches/{job_id}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        events = await events_of(client, job_id)
    target = next(e["data"] for e in events if e["event"] == "target")
    assert (target["status"], target["error"]) == ("failed", "cancelled")
    assert events[-1]["event"] == "job" and events[-1]["data"]["status"] == "cancelled"
