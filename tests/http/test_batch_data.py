"""The service's JSONL export, retries, metadata, filtered lists and bulk cancel, over HTTP on
127.0.0.1; another caller's jobs are never listed, exported, retried or cancelled."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from trio_batch import Config, Result
from trio_batch.http import _batch_data

from ..support.fakes import FakeClock, ScriptedFetch
from ..support.http_fixtures import BOB
from .test_http import Service, auth, problem, running

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=4, jobs_total=8, cancel_grace=0.01)


def _targets(*names: str) -> list[dict[str, Any]]:
    return [{"url": f"https://example.test/{n}", "custom_id": f"id-{n}"} for n in names]


async def _submit(
    s: Service, names: tuple[str, ...], token: str | None = None, **extra: Any
) -> Any:
    headers = auth() if token is None else auth(token)
    r = await s.client.post(
        "/v1/batches", json={"targets": _targets(*names), **extra}, headers=headers
    )
    assert r.status_code == 201, r.text
    return r.json()


async def _jsonl(s: Service, job_id: str, query: str = "", token: str | None = None) -> Any:
    headers = auth() if token is None else auth(token)
    r = await s.client.get(f"/v1/batches/{job_id}/results.jsonl{query}", headers=headers)
    if r.status_code != 200:
        return r
    assert r.headers["content-type"].startswith("application/jsonl")
    return [json.loads(line) for line in r.text.splitlines()]


async def test_metadata_and_custom_ids_come_back_and_bad_ones_are_422(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock, config=CONFIG) as s:
        job = await _submit(s, ("a", "b"), metadata={"team": "search"})
        assert job["metadata"] == {"team": "search"} and job["parent_id"] is None
        done = await s.wait_done(job["id"])
        assert done["metadata"] == {"team": "search"}
        view = (await s.get(job["id"])).json()
        assert [t["custom_id"] for t in view["targets"]] == ["id-a", "id-b"]
        for extra in ({"metadata": {"k": 1}}, {"metadata": ["x"]}, {"metadata": {"a:b": "c"}}):
            r = await s.client.post(
                "/v1/batches", json={"targets": _targets("c"), **extra}, headers=auth()
            )
            problem(r, 422, "invalid-request")
        repeated = [{"url": "https://example.test/x", "custom_id": "same"}] * 1 + [
            {"url": "https://example.test/y", "custom_id": "same"}
        ]
        r = await s.client.post("/v1/batches", json={"targets": repeated}, headers=auth())
        assert r.status_code == 422 and "custom_id" in r.json()["detail"]


async def test_results_jsonl_streams_every_target_resumes_and_merges_a_retry(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock, config=CONFIG) as s:
        job = await _submit(s, ("a", "fail", "c"))
        await s.wait_done(job["id"])
        lines = await _jsonl(s, job["id"])
        assert [(x["idx"], x["custom_id"], x["status"]) for x in lines] == [
            (0, "id-a", "done"),
            (1, "id-fail", "failed"),
            (2, "id-c", "done"),
        ]
        assert lines[0]["result"]["content"] == "content of https://example.test/a"
        assert "error" not in lines[0] and "result" not in lines[1]
        assert lines[1]["error"].startswith("Boom") and "hint" in lines[1]
        assert await _jsonl(s, job["id"], "?after=1") == lines[2:]
        problem(await _jsonl(s, job["id"], "?after=x"), 422, "invalid-request")
        problem(await _jsonl(s, job["id"], token=BOB), 404, "not-found")
        # Retry the failure (it succeeds now): bob cannot, alice gets a child job.
        fetch.custom["https://example.test/fail"] = lambda: Result("fine")
        r = await s.client.post(f"/v1/batches/{job['id']}/retry", json={}, headers=auth(BOB))
        problem(r, 404, "not-found")
        r = await s.client.post(
            f"/v1/batches/{job['id']}/retry", json={"only": ["failed"]}, headers=auth()
        )
        assert r.status_code == 201, r.text
        child = r.json()
        assert child["parent_id"] == job["id"] and r.headers["location"].endswith(child["id"])
        await s.wait_done(child["id"])
        again = await s.client.post(f"/v1/batches/{job['id']}/retry", headers=auth())
        assert again.status_code == 200 and again.json()["id"] == child["id"]
        merged = await _jsonl(s, job["id"], "?merged=1")
        assert [(x["idx"], x["status"], x["job_id"]) for x in merged] == [
            (0, "done", job["id"]),
            (1, "done", child["id"]),
            (2, "done", job["id"]),
        ]
        assert merged[1]["custom_id"] == "id-fail" and merged[1]["result"]["content"] == "fine"
        r = await s.client.post(
            f"/v1/batches/{job['id']}/retry", json={"only": ["everything"]}, headers=auth()
        )
        problem(r, 422, "invalid-request")


@pytest.mark.parametrize("only", [[["failed"]], [{}], [None], ["failed", ["pending"]]])
async def test_a_retry_naming_anything_but_kinds_is_422_and_makes_nothing(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, only: list[object]
) -> None:
    # A list or an object among them was put in a set first: TypeError, a 500.
    async with running(tmp_path, fetch, clock, config=CONFIG) as s:
        job = await _submit(s, ("a", "fail"))
        await s.wait_done(job["id"])
        url = f"/v1/batches/{job['id']}/retry"
        r = await s.client.post(url, json={"only": only}, headers=auth())
        assert "only may name failed and pending" in problem(r, 422, "invalid-request")["detail"]
        r = await s.client.get("/v1/batches", headers=auth())
        assert [j["id"] for j in r.json()["jobs"]] == [job["id"]]


async def _ids(s: Service, query: str, token: str | None = None) -> list[str]:
    """Every job id a filtered list gives, following its next links."""
    headers = auth() if token is None else auth(token)
    ids: list[str] = []
    link: str | None = f"/v1/batches?{query}"
    while link is not None:
        r = await s.client.get(link, headers=headers)
        assert r.status_code == 200, r.text
        ids += [job["id"] for job in r.json()["jobs"]]
        link = r.json()["next"]
    return ids


async def test_filtered_lists_and_bulk_cancel_keep_to_the_callers_own_jobs(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock, config=CONFIG) as s:
        started = fetch.watch("https://example.test/1/hang")
        mine = await _submit(s, ("1/hang",), metadata={"run": "nightly"})
        await started.wait()
        clock.advance(1)
        other = await _submit(s, ("2/hang",), metadata={"run": "adhoc"})
        clock.advance(1)
        ended = await _submit(s, ("ok",), metadata={"run": "nightly"})
        await s.wait_done(ended["id"])
        bobs = await _submit(s, ("1/hang",), token=BOB, metadata={"run": "nightly"})
        nightly = "label=run:nightly&limit=1"
        assert await _ids(s, nightly) == [ended["id"], mine["id"]]
        assert await _ids(s, "status=running") == [other["id"], mine["id"]]
        assert await _ids(s, "status=running,done&label=run:nightly") == [ended["id"], mine["id"]]
        assert await _ids(s, f"created_after={mine['created_at']!r}") == [ended["id"], other["id"]]
        assert await _ids(s, nightly, token=BOB) == [bobs["id"]]
        for bad in ("status=nope", "label=novalue", "created_after=soon", "colour=red"):
            problem(
                await s.client.get(f"/v1/batches?{bad}", headers=auth()), 422, "invalid-request"
            )
        # Bulk cancel: a filter is required, a dry run counts, then only alice's live ones go.
        r = await s.client.post("/v1/batches/cancel", json={}, headers=auth())
        problem(r, 422, "invalid-request")
        dry = await s.client.post(
            "/v1/batches/cancel", json={"label": "run:nightly", "dry_run": True}, headers=auth()
        )
        assert dry.json() == {"dry_run": True, "count": 1, "ids": [mine["id"]]}
        assert (await s.get(mine["id"])).json()["status"] == "running"
        r = await s.client.post(
            "/v1/batches/cancel", json={"label": ["run:nightly"]}, headers=auth()
        )
        assert r.json() == {"dry_run": False, "count": 1, "ids": [mine["id"]]}
        assert (await s.get(mine["id"])).json()["status"] == "cancelled"
        assert (await s.get(other["id"])).json()["status"] == "running"
        assert (await s.get(bobs["id"], token=BOB)).json()["status"] == "running"
        r = await s.client.post("/v1/batches/cancel", json={"all": True}, headers=auth())
        assert r.json()["ids"] == [other["id"]]
        assert (await s.get(bobs["id"], token=BOB)).json()["status"] == "running"
        r = await s.client.post("/v1/batches/cancel", json={"all": True}, headers=auth(BOB))
        assert r.json()["ids"] == [bobs["id"]]


async def test_a_client_may_stop_reading_an_export_midway(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    config = Config(ttl=100, targets_per_job=500, jobs_per_caller=1, jobs_total=2)
    async with running(tmp_path, fetch, clock, config=config) as s:
        names = tuple(f"p/{i}" for i in range(400))
        job = await _submit(s, names)
        await s.wait_done(job["id"])
        async with s.client.stream(
            "GET", f"/v1/batches/{job['id']}/results.jsonl", headers=auth()
        ) as r:
            first = await anext(r.aiter_lines())
        assert json.loads(first)["idx"] == 0
        # The service goes on serving after the abandoned stream.
        assert len(await _jsonl(s, job["id"], "?after=398")) == 1


async def test_a_big_result_in_the_export_is_encoded_off_the_event_loop(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same class as GET .../targets/{idx}: a big result encoded on the loop stalls every
    # request beside it. Which thread encodes each line is recorded, not how long it takes.
    big = "é" * (_batch_data.BIG_LINE + 1)
    fetch.custom["https://example.test/big"] = lambda: Result(big)
    on_loop: list[tuple[int, bool]] = []
    real = _batch_data.encode_line

    def encode(line: dict[str, Any]) -> str:
        on_loop.append((line["idx"], threading.current_thread() is threading.main_thread()))
        return real(line)

    monkeypatch.setattr(_batch_data, "encode_line", encode)
    async with running(tmp_path, fetch, clock, config=CONFIG) as s:
        job = await _submit(s, ("small", "big"))
        await s.wait_done(job["id"])
        lines = await _jsonl(s, job["id"])
    assert [line["result"]["content"] for line in lines] == [
        "content of https://example.test/small",
        big,
    ]
    assert on_loop == [(0, True), (1, False)]


async def test_a_created_after_no_time_can_be_is_a_422_not_a_server_error(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # An int past any float made the bulk cancel raise OverflowError: a 500.
    async with running(tmp_path, fetch, clock, config=CONFIG) as s:
        for bad in (10**400, -1, 1e300, "9999999999999"):
            r = await s.client.post(
                "/v1/batches/cancel", json={"created_after": bad}, headers=auth()
            )
            problem(r, 422, "invalid-request")
            assert "created_after must be epoch seconds" in r.json()["detail"]
        r = await s.client.get("/v1/batches?created_after=999999999999", headers=auth())
        problem(r, 422, "invalid-request")
        when = "2026-12-01T00:00:00Z"
        r = await s.client.post(
            "/v1/batches/cancel", json={"created_after": when, "dry_run": True}, headers=auth()
        )
        assert r.json() == {"dry_run": True, "count": 0, "ids": []}
