"""The HTTP service, against a real Hypercorn server on 127.0.0.1 driven with httpx.

Most tests serve the application in-process, on the test's own trio run, with the scripted
fetch function from conftest; a few run ``trio-batch serve`` in a subprocess.
"""

from __future__ import annotations

import gc
import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from starlette.applications import Starlette
from starlette.routing import Route

from trio_batch import Config, JobState, Store, TargetState
from trio_batch.http import Caller, HeaderAuth, TokenAuth, create_app, load_fetch, serve
from trio_batch.http._openapi import openapi_document

from ..support.cli_runner import run_cli
from ..support.fakes import T0, FakeClock, ScriptedFetch
from ..support.http_fixtures import ALICE, BOB, sse_events, start_server
from ..support.local_server import LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

AUTH = TokenAuth({ALICE: Caller("alice", "user"), BOB: Caller("bob", "user")})
CONFIG = Config(ttl=100, targets_per_job=4, jobs_per_caller=1, jobs_total=2)


def auth(token: str = ALICE) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def body(*names: str, **extra: Any) -> dict[str, Any]:
    return {"targets": [{"url": f"https://example.test/{n}"} for n in names], **extra}


@dataclass
class Service:
    client: httpx.AsyncClient
    url: str
    db: Path
    stop: trio.Event
    fetch: Any
    clock: FakeClock

    async def submit(self, *names: str, token: str = ALICE) -> dict[str, Any]:
        r = await self.client.post("/v1/batches", json=body(*names), headers=auth(token))
        assert r.status_code == 201, r.text
        data: dict[str, Any] = r.json()
        return data

    async def submit_held(self, *names: str) -> tuple[str, trio.Event]:
        """Submit a job whose first target, ``gate``, is held in flight until the returned
        event is set; returns once it is being fetched."""
        started, release = self.fetch.gate("https://example.test/gate")
        job_id: str = (await self.submit("gate", *names))["id"]
        await started.wait()
        return job_id, release

    async def get(self, job_id: str, token: str = ALICE) -> httpx.Response:
        return await self.client.get(f"/v1/batches/{job_id}", headers=auth(token))

    async def wait_done(self, job_id: str, token: str = ALICE) -> dict[str, Any]:
        """Follow the job's event stream to its final event; returns the terminal job."""
        async with self.client.stream(
            "GET", f"/v1/batches/{job_id}/events", headers=auth(token)
        ) as r:
            assert r.status_code == 200
            async for event in sse_events(r):
                if event["event"] == "job":
                    data: dict[str, Any] = event["data"]
                    return data
        raise AssertionError("the stream ended without a job event")


@asynccontextmanager
async def running(
    tmp_path: Path,
    fetch: Any,
    clock: FakeClock,
    **options: Any,
) -> AsyncIterator[Service]:
    """Serve a fresh application on 127.0.0.1 (a free port) until the block ends."""
    options.setdefault("auth", AUTH)
    options.setdefault("config", CONFIG)
    db = tmp_path / "jobs.db"
    app = create_app(db=db, fetch=fetch, now=clock, **options)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            partial(serve, app, bind="127.0.0.1:0", shutdown_trigger=stop.wait)
        )
        async with httpx.AsyncClient(base_url=urls[0]) as client:
            yield Service(client, urls[0], db, stop, fetch, clock)
        stop.set()


def problem(r: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    """Check ``r`` is an RFC 9457 problem of this status and kind; return its body."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    data: dict[str, Any] = r.json()
    assert data["type"] == f"urn:trio-batch:problem:{kind}"
    assert data["status"] == status
    assert isinstance(data["title"], str) and isinstance(data["detail"], str)
    return data


# --------------------------------------------------------------------------------------------
# Submitting and reading


async def test_submit_then_get_then_resubmit(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        r = await svc.client.post("/v1/batches", json=body("a", "b/fail"), headers=auth())
        assert r.status_code == 201
        created = r.json()
        job_id = created["id"]
        assert r.headers["location"] == f"/v1/batches/{job_id}"
        assert created["reused"] is False
        assert created["status"] == "running"
        assert created["caller"] == "alice" and created["caller_class"] == "user"
        assert created["expires_at"] == T0 + CONFIG.ttl
        final = await svc.wait_done(job_id)
        assert final["status"] == "partial"
        assert final["counts"] == {"pending": 0, "running": 0, "done": 1, "failed": 1}

        r = await svc.get(job_id)
        assert r.status_code == 200
        job = r.json()
        assert job["status"] == "partial" and job["error"] is None
        assert (job["targets_total"], job["targets_done"], job["targets_failed"]) == (2, 2, 1)
        assert job["counts"] == final["counts"]
        first, second = job["targets"]
        assert first["status"] == "done"
        # The job view is small: each result is read on its own (issue 12).
        assert "result" not in first and first["result_size"] > 0
        r = await svc.client.get(first["result_url"], headers=auth())
        assert r.status_code == 200
        result = r.json()["result"]
        assert result == {
            "content": "content of https://example.test/a",
            "meta": {"url": "https://example.test/a"},
        }
        # As documented: the characters of the result's compact JSON, content and meta.
        assert first["result_size"] == len(json.dumps(result, separators=(",", ":")))
        assert second["status"] == "failed" and second["result_url"] is None
        assert second["error"] == "Boom: cannot fetch https://example.test/b/fail"
        assert second["hint"] == "check the URL"

        # The same batch (spelled differently) again: the same job, nothing fetched again.
        spelled = {"targets": [{"url": "https://example.test/a", "options": {}}]}
        spelled["targets"].append({"options": {"grep": ""}, "url": "https://example.test/b/fail"})
        r = await svc.client.post("/v1/batches", json=spelled, headers=auth())
        assert r.status_code == 200
        assert r.json()["id"] == job_id and r.json()["reused"] is True
        assert r.headers["location"] == f"/v1/batches/{job_id}"
        assert len(fetch.calls) == 2


async def test_options_and_caller_class_are_kept(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        target = {"url": "https://example.test/x", "options": {"grep": "a+", "context": True}}
        r = await svc.client.post(
            "/v1/batches", json={"targets": [target], "caller_class": "user"}, headers=auth()
        )
        assert r.status_code == 201
        await svc.wait_done(r.json()["id"])
        got = (await svc.get(r.json()["id"])).json()
        assert got["targets"][0]["options"] == {"grep": "a+", "context": True}


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({}, "no header"),
        ({"Authorization": "Bearer not-a-known-token-at-all"}, "unknown token"),
        ({"Authorization": f"Basic {ALICE}"}, "wrong scheme"),
        ({"Authorization": "Bearer"}, "no token"),
        ({"Authorization": f"Bearer {ALICE[:-1]}"}, "a prefix of a token"),
    ],
)
async def test_without_valid_credentials_every_job_endpoint_is_401(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, headers: dict[str, str], why: str
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        job_id = (await svc.submit("a"))["id"]
        for method, path in [
            ("POST", "/v1/batches"),
            ("GET", f"/v1/batches/{job_id}"),
            ("POST", f"/v1/batches/{job_id}/cancel"),
            ("GET", f"/v1/batches/{job_id}/events"),
        ]:
            r = await svc.client.request(method, path, headers=headers, json=body("b"))
            problem(r, 401, "unauthorized")
            assert r.headers["www-authenticate"] == 'Bearer realm="trio-batch"'
            assert ALICE not in r.text
        assert fetch.calls == ["https://example.test/a"]


async def test_bodies_that_are_not_json_are_400(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        as_json = auth() | {"Content-Type": "application/json"}
        bad = [b"", b"not json", b'{"targets": [', b"\xff\xfe\x00", b'{"a": NaN}', b"[1e400]"]
        for content in bad:
            r = await svc.client.post("/v1/batches", content=content, headers=as_json)
            problem(r, 400, "malformed-json")
        deep = b"[" * 100_000 + b"]" * 100_000
        r = await svc.client.post("/v1/batches", content=deep, headers=as_json)
        assert r.status_code in (400, 413)  # nesting past the parser's limit, or the body cap


async def test_bodies_past_the_limit_are_413(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock, max_body=1000) as svc:
        big = json.dumps(body("x" * 2000)).encode()
        r = await svc.client.post(
            "/v1/batches", content=big, headers=auth() | {"Content-Type": "application/json"}
        )
        problem(r, 413, "body-too-large")

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked
            for _ in range(20):
                yield b" " * 100

        r = await svc.client.post(
            "/v1/batches", content=chunks(), headers=auth() | {"Content-Type": "application/json"}
        )
        problem(r, 413, "body-too-large")
        assert fetch.calls == []


@pytest.mark.parametrize(
    ("payload", "kind", "index", "detail_part"),
    [
        ([], "invalid-request", None, "JSON object"),
        ({"targets": [{"url": "https://a.test/"}], "extra": 1}, "invalid-request", None, "extra"),
        ({}, "invalid-request", None, "needs 'targets'"),
        ({"targets": "https://a.test/"}, "invalid-targets", None, "array"),
        ({"targets": []}, "invalid-targets", None, "at least one"),
        (body("a", "b") | {"targets": [{"url": "https://a.test/"}, 5]}, "invalid-targets", 1, ""),
        ({"targets": [{"url": "https://a.test/"}, {"url": ""}]}, "invalid-targets", 1, "empty"),
        (
            {"targets": [{"url": "https://a.test/"}, {"url": "https://b.test/", "x": 1}]},
            "invalid-targets",
            1,
            "unknown target key",
        ),
        (
            {"targets": [{"url": "https://a.test/", "options": {"grep": 5}}]},
            "invalid-targets",
            0,
            "grep",
        ),
        (
            {"targets": [{"url": "https://a.test/"}, {"url": "https://a.test/"}]},
            "invalid-targets",
            1,
            "repeats target 0",
        ),
        (body("a", "b", "c", "d", "e"), "too-many-targets", None, "limit is 4"),
        (body("a") | {"caller_class": ""}, "invalid-request", None, "caller_class"),
        (body("a") | {"caller_class": 7}, "invalid-request", None, "caller_class"),
    ],
)
async def test_invalid_submissions_are_422_and_say_which_target(
    tmp_path: Path,
    fetch: ScriptedFetch,
    clock: FakeClock,
    payload: object,
    kind: str,
    index: int | None,
    detail_part: str,
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        r = await svc.client.post("/v1/batches", json=payload, headers=auth())
        data = problem(r, 422, kind)
        assert data.get("index") == index
        assert detail_part in data["detail"]
        assert fetch.calls == []


async def test_a_caller_class_other_than_the_tokens_is_403(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        r = await svc.client.post(
            "/v1/batches", json=body("a", caller_class="admin"), headers=auth()
        )
        data = problem(r, 403, "forbidden-caller-class")
        assert "'user'" in data["detail"]


async def test_full_caps_are_429_with_retry_after(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    tokens = {f"caller-{i}-token-0123456789": Caller(f"c{i}") for i in range(3)}
    async with running(tmp_path, fetch, clock, auth=TokenAuth(tokens), retry_after=7) as svc:
        t0, t1, t2 = tokens
        started, release = fetch.gate("https://example.test/gate")
        first = await svc.submit("gate", token=t0)
        await started.wait()
        r = await svc.client.post("/v1/batches", json=body("other"), headers=auth(t0))
        busy = problem(r, 429, "caller-busy")
        # It names the job in the way (issue 12), so the caller can follow or cancel it.
        assert busy["job"] == f"/v1/batches/{first['id']}"
        assert first["id"] in busy["detail"]
        assert r.headers["retry-after"] == "7"
        await svc.submit("hang", token=t1)  # the second of two slots
        r = await svc.client.post("/v1/batches", json=body("x"), headers=auth(t2))
        problem(r, 429, "busy")
        assert r.headers["retry-after"] == "7"
        release.set()
        assert (await svc.wait_done(first["id"], t0))["status"] == "done"


# --------------------------------------------------------------------------------------------
# Reading, isolation, cancel


async def test_unknown_malformed_and_lapsed_jobs_are_404(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        job_id = (await svc.submit("a"))["id"]
        await svc.wait_done(job_id)
        for bad in ["A" * 22, "nope", "%2e%2e", "a" * 500]:
            problem(await svc.get(bad), 404, "not-found")
            r = await svc.client.post(f"/v1/batches/{bad}/cancel", headers=auth())
            problem(r, 404, "not-found")
            r = await svc.client.get(f"/v1/batches/{bad}/events", headers=auth())
            problem(r, 404, "not-found")
        clock.advance(CONFIG.ttl)
        problem(await svc.get(job_id), 404, "not-found")


async def test_a_caller_sees_and_cancels_only_its_own_jobs(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        started, release = fetch.gate("https://example.test/gate")
        job_id = (await svc.submit("gate", "b"))["id"]
        await started.wait()
        unknown = problem(await svc.get("B" * 22, token=BOB), 404, "not-found")
        theirs = problem(await svc.get(job_id, token=BOB), 404, "not-found")
        assert theirs == unknown  # nothing tells an existing job from an unknown one
        r = await svc.client.post(f"/v1/batches/{job_id}/cancel", headers=auth(BOB))
        assert problem(r, 404, "not-found") == unknown
        r = await svc.client.get(f"/v1/batches/{job_id}/events", headers=auth(BOB))
        assert problem(r, 404, "not-found") == unknown
        # Bob submitting the same targets gets a job of his own.
        bobs = await svc.submit("gate", "b", token=BOB)
        assert bobs["id"] != job_id and bobs["caller"] == "bob"
        release.set()
        assert (await svc.wait_done(job_id))["status"] == "done"
        assert (await svc.get(job_id)).json()["status"] == "done"


async def test_cancel_a_live_job_then_again(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        started, release = fetch.gate("https://example.test/gate")
        job_id = (await svc.submit("a", "gate", "c"))["id"]
        await started.wait()
        r = await svc.client.post(f"/v1/batches/{job_id}/cancel", headers=auth())
        assert r.status_code == 200
        assert r.json()["id"] == job_id and r.json()["status"] == "cancelled"
        release.set()
        final = await svc.wait_done(job_id)
        assert final["status"] == "cancelled"
        # The in-flight target finished and was kept; the last one never started.
        assert final["counts"] == {"pending": 1, "running": 0, "done": 2, "failed": 0}
        r = await svc.client.post(f"/v1/batches/{job_id}/cancel", headers=auth())
        data = problem(r, 409, "already-finished")
        assert "cancelled" in data["detail"]
        assert "https://example.test/c" not in fetch.calls


# --------------------------------------------------------------------------------------------
# Server-Sent Events


async def test_events_stream_each_outcome_in_order_then_the_job(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock, heartbeat=0.01) as svc:
        started, release = fetch.gate("https://example.test/gate")
        job_id = (await svc.submit("a", "gate", "c/fail", "d"))["id"]
        await started.wait()
        events: list[dict[str, Any]] = []
        async with svc.client.stream("GET", f"/v1/batches/{job_id}/events", headers=auth()) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["cache-control"] == "no-store"
            lines = r.aiter_lines()
            # Target 0 was stored before the stream began; then the job waits at the gate, and
            # an idle stream gets keep-alive comments (one may come first on a loaded machine,
            # while target 0 is read).
            seen: list[str] = []
            async for line in lines:
                seen.append(line)
                if line == ": keep-alive" and "id: 0" in seen:
                    break
            assert "event: target" in seen and "id: 1" not in seen
            release.set()
            async for event in sse_events(lines):
                events.append(event)
        assert [(e["event"], e.get("id")) for e in events] == [
            ("target", "1"),
            ("target", "2"),
            ("target", "3"),
            ("job", None),
        ]
        assert [e["data"]["status"] for e in events[:3]] == ["done", "failed", "done"]
        assert events[1]["data"]["error"].startswith("Boom:")
        job = events[-1]["data"]
        assert job["id"] == job_id and job["status"] == "partial"
        assert job["counts"] == {"pending": 0, "running": 0, "done": 3, "failed": 1}

        # A finished job replays from the store; Last-Event-ID skips what was seen.
        async with svc.client.stream(
            "GET", f"/v1/batches/{job_id}/events", headers=auth() | {"Last-Event-ID": "1"}
        ) as r:
            replay = [event async for event in sse_events(r)]
        assert [(e["event"], e.get("id")) for e in replay] == [
            ("target", "2"),
            ("target", "3"),
            ("job", None),
        ]
        assert replay[-1]["data"] == job


async def test_a_client_leaving_an_event_stream_does_not_disturb_the_job(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        started, release = fetch.gate("https://example.test/gate")
        job_id = (await svc.submit("gate", "b"))["id"]
        await started.wait()
        async with svc.client.stream("GET", f"/v1/batches/{job_id}/events", headers=auth()) as r:
            async for line in r.aiter_lines():
                assert line.startswith(":")
                break  # leave while the job is still running
        release.set()
        assert (await svc.wait_done(job_id))["status"] == "done"


# --------------------------------------------------------------------------------------------
# Health, metrics, OpenAPI, errors outside the API


async def test_healthz_metrics_and_openapi(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        r = await svc.client.get("/healthz")
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        job_id = (await svc.submit("a", "b/fail", "c"))["id"]
        await svc.wait_done(job_id)
        await svc.client.get("/v1/batches/" + "x" * 22, headers=auth())

        r = await svc.client.get("/metrics")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        samples = {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in r.text.splitlines()
            if line and not line.startswith("#")
        }
        assert samples['trio_batch_jobs{status="partial"}'] == 1
        assert samples['trio_batch_jobs{status="running"}'] == 0
        assert samples['trio_batch_targets{status="done"}'] == 2
        assert samples['trio_batch_targets{status="failed"}'] == 1
        assert samples['trio_batch_targets{status="unfinished"}'] == 0
        # Store writes are timed: the job's creation, then its outcomes' commits.
        assert samples['trio_batch_store_write_seconds_count{operation="create_job"}'] == 1
        assert samples['trio_batch_store_write_seconds_count{operation="record_outcomes"}'] >= 1
        assert samples['trio_batch_http_requests_total{code="201",route="/v1/batches"}'] == 1
        assert samples['trio_batch_http_requests_total{code="404",route="/v1/batches/{id}"}'] == 1

        r = await svc.client.get("/openapi.json")
        assert r.status_code == 200
        doc = r.json()
        assert doc["openapi"].startswith("3.")
        assert {"/v1/batches", "/v1/batches/{id}", "/openapi.json"} <= set(doc["paths"])
        assert doc["components"]["securitySchemes"]["caller"]["scheme"] == "bearer"


def _served_api_routes(app: Starlette) -> dict[str, set[str]]:
    """The API's routes as the application serves them (the dashboard's pages aside)."""
    served: dict[str, set[str]] = {}
    for route in app.routes:
        if isinstance(route, Route) and not route.path.startswith("/ui") and route.path != "/":
            served.setdefault(route.path, set()).update(
                m.lower() for m in route.methods or () if m != "HEAD"
            )
    return served


def test_the_openapi_document_describes_every_route_served_and_no_other(
    fetch: ScriptedFetch,
) -> None:
    # Read from the route table, so a route added without its description fails here.
    served = _served_api_routes(create_app(db=":memory:", fetch=fetch, auth=AUTH))
    documented = {
        path: {m for m in item if m in {"get", "post", "put", "delete", "patch"}}
        for path, item in openapi_document()["paths"].items()
    }
    assert documented == served
    assert {"/v1/batches", "/v1/batches/{id}", "/healthz", "/metrics"} <= served.keys()


async def test_unknown_routes_and_methods_answer_with_problems(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        problem(await svc.client.get("/v2/nothing"), 404, "not-found")
        r = await svc.client.put("/v1/batches/" + "x" * 22, headers=auth())
        problem(r, 405, "method-not-allowed")
        assert {"GET", "DELETE"} <= set(r.headers["allow"].replace(" ", "").split(","))


async def test_a_caller_header_behind_a_gateway(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock, auth=HeaderAuth("X-Caller")) as svc:
        r = await svc.client.post("/v1/batches", json=body("a"))
        problem(r, 401, "unauthorized")
        r = await svc.client.post("/v1/batches", json=body("a"), headers={"X-Caller": ""})
        problem(r, 401, "unauthorized")
        r = await svc.client.post(
            "/v1/batches",
            json=body("a", caller_class="batch"),
            headers={"X-Caller": "carol"},
        )
        assert r.status_code == 201
        job = r.json()
        assert (job["caller"], job["caller_class"]) == ("carol", "batch")
        r = await svc.client.get(f"/v1/batches/{job['id']}", headers={"X-Caller": "dave"})
        problem(r, 404, "not-found")
        r = await svc.client.get(f"/v1/batches/{job['id']}", headers={"X-Caller": "carol"})
        assert r.status_code == 200
        doc = (await svc.client.get("/openapi.json")).json()
        assert doc["components"]["securitySchemes"]["caller"]["name"] == "x-caller"


# --------------------------------------------------------------------------------------------
# Shutdown


async def test_shutdown_with_a_job_mid_flight_marks_it_and_ends_streams(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    started = fetch.watch("https://example.test/hang")
    async with running(tmp_path, fetch, clock) as svc:
        job_id = (await svc.submit("a", "hang", "c"))["id"]
        await started.wait()
        events: list[dict[str, Any]] = []
        async with svc.client.stream("GET", f"/v1/batches/{job_id}/events", headers=auth()) as r:
            async for event in sse_events(r):
                events.append(event)
                if event["event"] == "target":
                    svc.stop.set()  # the server begins shutting down mid-job
        assert [e["event"] for e in events] == ["target", "shutdown"]
    with Store.open(svc.db) as store:
        status = store.get_status(job_id, now=clock())
    assert status is not None
    job, targets = status
    assert (job.status, job.error) == (JobState.FAILED, "shutdown")
    assert [t.status for t in targets] == [
        TargetState.DONE,
        TargetState.PENDING,
        TargetState.PENDING,
    ]


# --------------------------------------------------------------------------------------------
# Tokens and --fetch


def test_tokens_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# callers\n{ALICE} alice user\n\n{BOB} bob  # no class: default\n")
    tokens = TokenAuth.from_file(path)
    assert tokens.authenticate({"authorization": f"Bearer {ALICE}"}) == Caller("alice", "user")
    assert tokens.authenticate({"authorization": f"bearer  {BOB} "}) == Caller("bob", "default")
    assert tokens.authenticate({"authorization": "Bearer nope"}) is None
    assert ALICE not in repr(tokens)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "holds no token"),
        ("short alice\n", "line 1: the token is shorter"),
        (f"{ALICE}\n", "line 1: expected"),
        (f"{ALICE} a b c\n", "line 1: expected"),
        (f"{ALICE} alice\n{ALICE} bob\n", "line 2: the token repeats"),
    ],
)
def test_bad_tokens_files_say_which_line_and_never_the_token(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        TokenAuth.from_file(path)
    assert ALICE not in str(info.value)


@pytest.mark.parametrize("token", ["pässwörd-0123456789abcdef", "token-0123456789abcdef\x7f"])
def test_a_token_a_client_cannot_send_as_written_is_refused_at_start(
    tmp_path: Path, token: str
) -> None:
    # Its UTF-8 bytes come back from the server read as Latin-1: it never matched, and the
    # service started regardless, refusing that caller every request with a bare 401.
    path = tmp_path / "tokens"
    path.write_text(f"{ALICE} alice\n{token} carol\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2: the token holds a character other than") as info:
        TokenAuth.from_file(path)
    assert token not in str(info.value) and ALICE not in str(info.value)


def test_load_fetch() -> None:
    from ..support import http_fixtures

    assert load_fetch("tests.support.http_fixtures:fetch") is http_fixtures.fetch
    for spec, message in [
        ("tests.support.http_fixtures", "module:function"),
        ("no_such_module_here:fetch", "cannot import"),
        ("tests.support.http_fixtures:nothing", "no attribute"),
        ("tests.support.http_fixtures:not_a_function", "not a function"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_fetch(spec)


# --------------------------------------------------------------------------------------------
# The command, in a subprocess


@pytest.mark.parametrize("freeze", [False, True])
async def test_serve_freezes_the_heap_once_up_only_when_asked(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, freeze: bool
) -> None:
    # The command asks (its process is its own); an embedding program's heap is left alone.
    gc.unfreeze()
    app = create_app(db=tmp_path / "jobs.db", fetch=fetch, now=clock, auth=AUTH, config=CONFIG)
    stop = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(
                    serve, app, bind="127.0.0.1:0", shutdown_trigger=stop.wait, freeze_heap=freeze
                )
            )
            assert (gc.get_freeze_count() > 0) is freeze
            stop.set()
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_command_serves_and_shuts_down_cleanly_on_a_signal(
    tmp_path: Path, signum: signal.Signals
) -> None:
    proc, url = start_server(tmp_path)
    try:
        with httpx.Client(base_url=url) as client:
            r = client.post("/v1/batches", json=body("a", "b"), headers=auth())
            assert r.status_code == 201
            done_id = r.json()["id"]
            with client.stream("GET", f"/v1/batches/{done_id}/events", headers=auth()) as s:
                kinds = [line for line in s.iter_lines() if line.startswith("event:")]
            assert kinds == ["event: target", "event: target", "event: job"]
            r = client.post("/v1/batches", json=body("x", "hang"), headers=auth(BOB))
            assert r.status_code == 201
            live_id = r.json()["id"]
            with client.stream("GET", f"/v1/batches/{live_id}/events", headers=auth(BOB)) as s:
                for line in s.iter_lines():
                    if line == "event: target":
                        break  # the first target is stored; the second hangs
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert ALICE not in stderr and BOB not in stderr
    with Store.open(tmp_path / "jobs.db") as store:
        done = store.get_job(done_id)
        live = store.get_job(live_id)
    assert done is not None and done.status == JobState.DONE
    assert live is not None and (live.status, live.error) == (JobState.FAILED, "shutdown")
    assert live.targets_done == 1


def test_the_command_retries_a_transient_failure(tmp_path: Path, server: LocalServer) -> None:
    flaky = server.url("/flaky?fail=1&status=503")
    proc, url = start_server(tmp_path, "--allow-private", "--retries", "1", fetch=None)
    try:
        with httpx.Client(base_url=url) as client:
            r = client.post("/v1/batches", json={"targets": [{"url": flaky}]}, headers=auth())
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            with client.stream("GET", f"/v1/batches/{job_id}/events", headers=auth()) as s:
                kinds = [line for line in s.iter_lines() if line.startswith("event:")]
            assert kinds == ["event: target", "event: job"]
            target = client.get(f"/v1/batches/{job_id}/targets/0", headers=auth()).json()
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert (target["status"], target["attempts"]) == ("done", 2)
    assert server.count("/flaky?fail=1&status=503") == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--db", "x.db"], "one of the arguments --tokens --caller-header is required"),
        (["--db", "x.db", "--caller-header", "X", "--fetch", "nope"], "module:function"),
        (["--db", "x.db", "--tokens", "/no/such/file"], "No such file"),
        (["--db", "x.db", "--caller-header", "bad header"], "not a valid header name"),
    ],
)
def test_the_command_refuses_bad_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)  # x.db, should it be made, is made there
    proc = run_cli(["serve", *args], stdin=None, env=os.environ)
    assert proc.returncode == 2
    assert message in proc.stderr
