"""The service under hostile use (issue 12): strict header parsing, every answer counted,
start-up failures reported in one line, no redirects built from request headers, ..."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
from pathlib import Path

import pytest
import trio
import trio.testing
from starlette.datastructures import Headers

from trio_batch import Result, Target
from trio_batch.http import Caller, HeaderAuth, TokenAuth
from trio_batch.http._dashboard import DASHBOARD_HEADERS
from trio_batch.http._headers import API_HEADERS

from ..support.cli_runner import run_cli
from ..support.fakes import FakeClock, ScriptedFetch
from ..support.http_fixtures import ALICE, BOB, sse_events, start_server
from ..support.tls_server import until
from .test_http import auth, body, problem, running


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text exposition (0 if absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def open_raw(url: str) -> trio.SocketStream:
    """A plain TCP connection to the service, for requests httpx would refuse to send."""
    host, port = url.removeprefix("http://").split(":")
    return await trio.open_tcp_stream(host, int(port))


async def raw_request(url: str, head: str, body: bytes = b"") -> bytes:
    """Send ``head`` (request line and headers, without the blank line) and ``body``; returns
    the first bytes of the answer."""
    with trio.fail_after(30):
        stream = await open_raw(url)
        await stream.send_all(head.encode("latin-1") + b"\r\n\r\n" + body)
        reply = await stream.receive_some(65536)
        await stream.aclose()
    return bytes(reply)


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


@pytest.mark.parametrize("value", ["²", "³", "¹", "٣", "1²", "-1", "+1", "0x1", "1 1"])
async def test_a_last_event_id_that_is_not_ascii_digits_replays_everything(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, value: str
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        job_id = (await svc.submit("a", "b"))["id"]
        await svc.wait_done(job_id)
        # Header bytes are read as Latin-1: b"\xb2" arrives as "²", which isdigit() accepted.
        raw = value.encode("latin-1") if value.isascii() or value in "²³¹" else value.encode()
        headers: dict[str, str | bytes] = {**auth(), "Last-Event-ID": raw}
        async with svc.client.stream("GET", f"/v1/batches/{job_id}/events", headers=headers) as r:
            assert r.status_code == 200
            events = [e async for e in sse_events(r)]
        assert [(e["event"], e.get("id")) for e in events] == [
            ("target", "0"),
            ("target", "1"),
            ("job", None),
        ]


@pytest.mark.parametrize("value", ["²", "9" * 40, "1e3"])
async def test_a_content_length_that_is_not_ascii_digits_is_not_a_500(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, value: str
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        payload = b'{"targets": [{"url": "https://example.test/a"}]}'
        head = (
            f"POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n"
            f"Content-Length: {value}\r\nContent-Type: application/json"
        )
        assert status_of(await raw_request(svc.url, head, payload)) < 500


class ExplodingAuth(TokenAuth):
    """Token auth that fails unexpectedly when a request carries ``X-Boom``."""

    def authenticate(self, headers: Headers) -> Caller | None:
        if "x-boom" in headers:
            raise RuntimeError("an unexpected bug")
        return super().authenticate(headers)


async def test_500_answers_are_counted_in_metrics(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    exploding = ExplodingAuth({ALICE: Caller("alice", "user"), BOB: Caller("bob", "user")})
    async with running(tmp_path, fetch, clock, auth=exploding) as svc:
        r = await svc.client.get("/v1/batches/x", headers=auth() | {"X-Boom": "1"})
        problem(r, 500, "internal-error")
        text = (await svc.client.get("/metrics")).text
    assert metric(text, "trio_batch_http_requests_total", route="/v1/batches/{id}", code="500") == 1


async def test_a_client_leaving_mid_body_is_counted_and_logged_quietly(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with running(tmp_path, fetch, clock) as svc:
        stream = await open_raw(svc.url)
        head = (
            f"POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n"
            "Content-Length: 1000\r\nContent-Type: application/json\r\n\r\n"
        )
        await stream.send_all(head.encode() + b'{"targets": [')
        await stream.aclose()
        with trio.fail_after(30):
            while True:  # until the server has seen the disconnect (real time, bounded)
                text = (await svc.client.get("/metrics")).text
                if metric(text, "trio_batch_http_disconnects_total", route="/v1/batches"):
                    break
                await trio.sleep(0.01)
    assert metric(text, "trio_batch_http_disconnects_total", route="/v1/batches") == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert any("client went away" in r.getMessage() for r in caplog.records)


def _serve_once(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``trio-batch serve`` in this process, expecting it to fail at start-up (one that
    served would run until the test's timeout failed it)."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ALICE} alice user\n")
    return run_cli(["serve", "--tokens", str(tokens), *args], stdin=None, env=os.environ)


def test_serve_with_a_database_held_by_another_runner_fails_in_one_line(tmp_path: Path) -> None:
    first, _ = start_server(tmp_path)
    try:
        second = _serve_once(tmp_path, "--db", str(tmp_path / "jobs.db"), "--bind", "127.0.0.1:0")
    finally:
        first.terminate()
        first.communicate(timeout=60)
    assert second.returncode == 3  # as `trio-batch run` exits for a held database
    assert "listening on" not in second.stdout
    assert second.stderr.count("\n") == 1, second.stderr
    assert second.stderr.startswith("trio-batch serve: another runner is already running")


def test_serve_on_a_port_in_use_fails_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve_once(
            tmp_path, "--db", str(tmp_path / "jobs.db"), "--bind", f"127.0.0.1:{port}"
        )
    assert result.returncode == 1
    assert "listening on" not in result.stdout
    assert (
        result.stderr == f"trio-batch serve: cannot listen on 127.0.0.1:{port}: "
        "Address already in use\n"
    )


def test_serve_with_an_unusable_database_fails_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "jobs.db"
    result = _serve_once(tmp_path, "--db", str(missing), "--bind", "127.0.0.1:0")
    assert result.returncode == 1
    assert "listening on" not in result.stdout
    assert result.stderr.startswith("trio-batch serve: cannot open the database")
    assert result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize("path", ["/metrics/", "/healthz/", "/v1/batches/", "/openapi.json/"])
async def test_no_redirect_is_built_from_the_host_header(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, path: str
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        reply = await raw_request(svc.url, f"GET {path} HTTP/1.1\r\nHost: evil.test")
    head = reply.split(b"\r\n\r\n", 1)[0].lower()
    assert status_of(reply) == 404
    assert b"location:" not in head and b"evil.test" not in reply


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"],
)
async def test_a_submission_that_is_not_sent_as_json_is_415(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, content_type: str | None
) -> None:
    """A form or text/plain POST needs no CORS preflight: refusing it closes a CSRF path
    behind a cookie-authenticated gateway (--caller-header)."""
    async with running(tmp_path, fetch, clock) as svc:
        headers = auth() | ({} if content_type is None else {"Content-Type": content_type})
        payload = b'{"targets": [{"url": "https://example.test/a"}]}'
        r = await svc.client.post("/v1/batches", content=payload, headers=headers)
        problem(r, 415, "unsupported-media-type")
        ok = auth() | {"Content-Type": "application/json; charset=utf-8"}
        r = await svc.client.post("/v1/batches", content=payload, headers=ok)
        assert r.status_code == 201
        job_id = r.json()["id"]
        if content_type is not None:
            r = await svc.client.post(f"/v1/batches/{job_id}/cancel", headers=headers)
            problem(r, 415, "unsupported-media-type")
        assert (await svc.wait_done(job_id))["status"] == "done"  # the refused cancel did nothing
    assert fetch.calls == ["https://example.test/a"]  # only the JSON submission ran


@pytest.mark.parametrize("where", ["url", "options", "top"])
async def test_a_huge_number_is_refused_without_leaking_internals(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, where: str
) -> None:
    huge = "1" * 5000
    payload = {
        "url": f'{{"targets": [{{"url": {huge}}}]}}',
        "options": (f'{{"targets": [{{"url": "https://a.test/", "options": {{"n": {huge}}}}}]}}'),
        "top": f'{{"targets": [], "n": -{huge}}}',
    }[where]
    async with running(tmp_path, fetch, clock) as svc:
        r = await svc.client.post(
            "/v1/batches",
            content=payload.encode(),
            headers=auth() | {"Content-Type": "application/json"},
        )
    detail = problem(r, 400, "malformed-json")["detail"]
    assert "5000 digits" in detail
    assert "sys." not in detail and "set_int_max_str_digits" not in detail


async def test_targets_a_cancelled_job_never_runs_are_not_unfinished(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        job_id, release = await svc.submit_held("b", "c")
        text = (await svc.client.get("/metrics")).text
        assert metric(text, "trio_batch_targets", status="unfinished") == 3
        r = await svc.client.post(f"/v1/batches/{job_id}/cancel", headers=auth())
        assert r.status_code == 200
        release.set()
        assert (await svc.wait_done(job_id))["status"] == "cancelled"
        text = (await svc.client.get("/metrics")).text
    assert metric(text, "trio_batch_targets", status="done") == 1  # the gated one finished
    assert metric(text, "trio_batch_targets", status="unfinished") == 0
    assert metric(text, "trio_batch_targets", status="abandoned") == 2


async def test_a_trickled_body_is_cut_off_with_408(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, mock_clock: trio.testing.MockClock
) -> None:
    """A client sending its body a byte at a time held the connection for 30 s (issue 12).
    Cut at ``body_timeout`` on trio's clock: not before, and not later."""
    async with running(tmp_path, fetch, clock, body_timeout=5) as svc:
        stream = await open_raw(svc.url)
        head = (
            f"POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n"
            "Content-Length: 1000\r\nContent-Type: application/json\r\n\r\n"
        )
        reply = bytearray()
        closed = trio.Event()

        async def read_to_the_close() -> None:
            while chunk := await stream.receive_some(65536):
                reply.extend(chunk)
            closed.set()

        async with trio.open_nursery() as nursery:
            await stream.send_all(head.encode() + b'{"targets": [')  # and never the rest
            nursery.start_soon(read_to_the_close)
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(4.9)
            await trio.testing.wait_all_tasks_blocked()
            assert not reply  # still within the body's time
            mock_clock.jump(0.2)
            await until(closed.is_set)
        await stream.aclose()
        assert status_of(bytes(reply)) == 408
        assert b"urn:trio-batch:problem:body-timeout" in reply
        text = (await svc.client.get("/metrics")).text
    assert metric(text, "trio_batch_http_requests_total", route="/v1/batches", code="408") == 1
    assert fetch.calls == []


async def test_a_caller_lists_its_own_jobs_newest_first_by_page(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        created = []
        for i in range(5):
            if i != 3:  # two jobs created at the same moment: the id orders them
                clock.advance(1)
            job_id = (await svc.submit(f"job{i}"))["id"]
            await svc.wait_done(job_id)
            created.append((clock(), job_id))
        await svc.wait_done((await svc.submit("bobs", token=BOB))["id"], token=BOB)
        seen: list[str] = []
        link: str | None = "/v1/batches?limit=2"
        pages = 0
        while link is not None:
            r = await svc.client.get(link, headers=auth())
            assert r.status_code == 200, r.text
            page = r.json()
            seen += [job["id"] for job in page["jobs"]]
            assert all("targets" not in job for job in page["jobs"])
            link = page["next"]
            pages += 1
        bobs = (await svc.client.get("/v1/batches", headers=auth(BOB))).json()
        for query in ("limit=0", "limit=101", "limit=²", "cursor=x", "cursor=1~short", "page=2"):
            r = await svc.client.get(f"/v1/batches?{query}", headers=auth())
            problem(r, 422, "invalid-request")
        problem(await svc.client.get("/v1/batches"), 401, "unauthorized")
    newest_first = [job_id for _, job_id in sorted(created, reverse=True)]
    assert seen == newest_first
    assert pages == 3
    assert [job["caller"] for job in bobs["jobs"]] == ["bob"] and bobs["next"] is None


async def test_the_job_view_stays_small_and_results_are_read_one_by_one(
    tmp_path: Path, clock: FakeClock
) -> None:
    """GET /v1/batches/{id} returned every result inline: 16 x 9 MB gave 154 MB (issue 12)."""
    big = 1_000_000

    async def fetch(target: Target) -> Result:
        await trio.lowlevel.checkpoint()
        return Result("x" * big + target.url[-1], {"n": big})

    async with running(tmp_path, fetch, clock) as svc:
        job_id = (await svc.submit("a", "b", "c"))["id"]
        await svc.wait_done(job_id)
        view = await svc.get(job_id)
        assert view.status_code == 200
        assert len(view.content) < 8192  # statuses and sizes only, however big the results
        targets = view.json()["targets"]
        assert [t["result_size"] for t in targets] == [targets[0]["result_size"]] * 3
        assert targets[0]["result_size"] > big
        contents = []
        for t in targets:
            r = await svc.client.get(t["result_url"], headers=auth())
            assert r.status_code == 200
            contents.append(r.json()["result"]["content"][-1])
        assert contents == ["a", "b", "c"]
        missing = problem(
            await svc.client.get(f"/v1/batches/{job_id}/targets/3", headers=auth()),
            404,
            "not-found",
        )
        theirs = problem(
            await svc.client.get(f"/v1/batches/{job_id}/targets/0", headers=auth(BOB)),
            404,
            "not-found",
        )
        assert missing["detail"] == theirs["detail"]  # another caller's reads as unknown
        for idx in ("-1", "²", "x", "9" * 12):
            r = await svc.client.get(f"/v1/batches/{job_id}/targets/{idx}", headers=auth())
            problem(r, 404, "not-found")


async def test_every_answer_forbids_sniffing_framing_and_shared_caching(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # Results are untrusted content: no answer of the API may be sniffed as HTML, framed or
    # cached by a proxy, whichever route, error or middleware produced it.
    exploding = ExplodingAuth({ALICE: Caller("alice", "user"), BOB: Caller("bob", "user")})
    async with running(tmp_path, fetch, clock, auth=exploding) as svc:
        c = svc.client
        submitted = await c.post("/v1/batches", json=body("a"), headers=auth())
        job_id = submitted.json()["id"]
        answers = {
            "submit": submitted,
            "job": await c.get(f"/v1/batches/{job_id}", headers=auth()),
            "list": await c.get("/v1/batches", headers=auth()),
            "404": await c.get("/v1/batches/nope", headers=auth()),
            "401": await c.get("/v1/batches"),
            "405": await c.put("/v1/batches", headers=auth()),
            "500": await c.get("/v1/batches/x", headers=auth() | {"X-Boom": "1"}),
            "healthz": await c.get("/healthz"),
            "metrics": await c.get("/metrics"),
            "openapi": await c.get("/openapi.json"),
            "unmatched": await c.get("/nowhere"),
        }
        async with c.stream("GET", f"/v1/batches/{job_id}/events", headers=auth()) as stream:
            answers["events"] = stream
        dashboard = await c.get("/ui/")
    assert answers["500"].status_code == 500  # Starlette's error middleware answered it
    for name, r in answers.items():
        for header, value in API_HEADERS.items():
            assert r.headers.get(header) == value, (name, header, r.headers)
    # The dashboard keeps its own, stricter policy rather than the API's.
    assert (
        dashboard.headers["content-security-policy"] == DASHBOARD_HEADERS["Content-Security-Policy"]
    )
    assert dashboard.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
async def test_changes_another_site_makes_through_the_browser_are_refused(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, site: str
) -> None:
    """Behind a gateway that adds the caller from a cookie (--caller-header), a page on another
    site could make the user's browser cancel a job: a bodiless POST needs no preflight."""
    gate, go = fetch.gate("https://example.test/slow")
    async with running(tmp_path, fetch, clock, auth=HeaderAuth("X-User")) as svc:
        c = svc.client
        user = {"X-User": "alice", "Content-Type": "application/json"}
        foreign = user | {"Sec-Fetch-Site": site}
        r = await c.post("/v1/batches", json=body("a"), headers=foreign)
        assert "Sec-Fetch-Site" in problem(r, 403, "cross-site")["detail"]
        own = user | {"Sec-Fetch-Site": "same-origin"}
        r = await c.post("/v1/batches", json=body("slow", "b"), headers=own)
        assert r.status_code == 201
        job_id = r.json()["id"]
        await gate.wait()
        bare = {"X-User": "alice", "Sec-Fetch-Site": site}  # no body, no Content-Type
        problem(await c.post(f"/v1/batches/{job_id}/cancel", headers=bare), 403, "cross-site")
        problem(await c.delete(f"/v1/batches/{job_id}", headers=bare), 403, "cross-site")
        r = await c.get(f"/v1/batches/{job_id}", headers=bare)  # a read changes nothing
        assert r.status_code == 200 and r.json()["status"] == "running"
        go.set()
        async with c.stream("GET", f"/v1/batches/{job_id}/events", headers=user) as stream:
            final = [event async for event in sse_events(stream) if event["event"] == "job"]
        assert final[0]["data"]["status"] == "done"  # the refused cancel did nothing
        # A client that is not a browser sends no Sec-Fetch-Site and is served as before.
        r = await c.delete(f"/v1/batches/{job_id}", headers={"X-User": "alice"})
        assert r.status_code == 204
    assert fetch.calls == ["https://example.test/slow", "https://example.test/b"]


async def test_a_url_with_control_characters_is_refused_with_422(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        evil = {"targets": [{"url": "https://example.test/?\u001b]0;PWNED\u0007\u001b[2J"}]}
        r = await svc.client.post("/v1/batches", json=evil, headers=auth())
        detail = problem(r, 422, "invalid-targets")["detail"]
        assert "U+001B" in detail and "\u001b" not in detail
        assert fetch.calls == []


@pytest.mark.parametrize(
    "text, key",
    [
        ('{"targets": [], "targets": [{"url": "https://example.test/a"}]}', "targets"),
        ('{"targets": [{"url": "https://example.test/a", "url": "https://x.test/"}]}', "url"),
    ],
)
async def test_a_repeated_json_key_is_refused_with_400_naming_it(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, text: str, key: str
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        headers = {**auth(), "Content-Type": "application/json"}
        r = await svc.client.post("/v1/batches", content=text, headers=headers)
        assert repr(key) in problem(r, 400, "malformed-json")["detail"]
        assert fetch.calls == []


async def _raw_answer(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is on a fresh connection; the status, headers and body back."""
    host, port = url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(request)
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk  # the server closes the connection after its error answer
    head, _, content = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
    return int(status_line.split()[1]), headers, content


@pytest.mark.parametrize(
    "request_bytes, status, kind",
    [
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
            431,
            "headers-too-large",
        ),
        (b"GARBAGE\r\n\r\n", 400, "malformed-request"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", 400, "malformed-request"),
    ],
)
async def test_requests_the_server_cannot_parse_get_problems_with_the_api_headers(
    tmp_path: Path,
    fetch: ScriptedFetch,
    clock: FakeClock,
    request_bytes: bytes,
    status: int,
    kind: str,
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        got, headers, content = await _raw_answer(svc.url, request_bytes)
    assert got == status
    for name, value in API_HEADERS.items():
        assert headers[name.lower()] == value
    assert headers["content-type"] == "application/problem+json"
    problem = json.loads(content)
    assert problem["type"] == f"urn:trio-batch:problem:{kind}" and problem["status"] == status


async def test_every_operation_documents_what_the_server_answers_a_request_it_cannot_parse(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # Regression: a generated request with a header no HTTP/1.1 parser takes
    # (``Content-Length: j``) got Hypercorn's 400 on an operation whose document listed
    # only 200, 401, 404 and 503. The server gives these answers on any path.
    from trio_batch.http._openapi import openapi_document

    bad_header = b"GET /v1/batches/x/targets/0 HTTP/1.1\r\nHost: x\r\nContent-Length: j\r\n\r\n"
    async with running(tmp_path, fetch, clock) as svc:
        got, _, _ = await _raw_answer(svc.url, bad_header)
    paths = openapi_document()["paths"]
    assert str(got) in paths["/v1/batches/{id}/targets/{idx}"]["get"]["responses"]
    for path, operations in paths.items():
        for method, op in operations.items():
            assert {"400", "431"} <= set(op["responses"]), (method, path)
