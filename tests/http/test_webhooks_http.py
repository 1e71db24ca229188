"""Webhooks through the service: a submit's "webhook", the delivery state in the job, the
redeliver endpoint, and `serve --webhook-secret-file`."""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme

from trio_batch.fetchers import DestinationPolicy, WebhookSender

from ..support.cli_runner import run_cli
from ..support.fakes import FakeClock, ScriptedFetch
from ..support.http_fixtures import ALICE, BOB, start_server, stop_server
from ..support.webhook_receiver import Receiver, receiving
from .test_http import Service, auth, body, problem, running


def sender(receiver: Receiver) -> WebhookSender:
    return WebhookSender(
        receiver.secret, DestinationPolicy(allow_private=True), ssl_context=receiver.client_context
    )


async def webhook_state(service: Service, job_id: str, state: str) -> dict[str, Any]:
    """The job's webhook once it reads ``state`` (the runner records an answer just after the
    receiver has sent it: read again until then)."""
    while True:
        r = await service.get(job_id)
        assert r.status_code == 200, r.text
        hook: dict[str, Any] = r.json()["webhook"]
        if hook["state"] == state:
            return hook
        await trio.sleep(0.02)


async def test_a_job_with_a_webhook_is_posted_and_its_delivery_shown_then_redelivered(
    tmp_path: Path, clock: FakeClock, receiver: Receiver
) -> None:
    fetch = ScriptedFetch()
    async with running(tmp_path, fetch, clock, webhooks=sender(receiver)) as service:
        r = await service.client.post(
            "/v1/batches",
            json=body("x", metadata={"team": "a"}, webhook={"url": receiver.url}),
            headers=auth(),
        )
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        await service.wait_done(job_id)
        await trio.to_thread.run_sync(receiver.wait_for, 1)
        hook = await webhook_state(service, job_id, "delivered")
        assert hook["url"] == receiver.url and hook["attempts"] == 1
        assert hook["last_answer"] == "HTTP 204" and hook["delivered_at"] == clock.now
        r = await service.client.post(f"/v1/batches/{job_id}/webhook/redeliver", headers=auth())
        assert r.status_code == 202, r.text
        assert r.json()["state"] == "pending"
        await trio.to_thread.run_sync(receiver.wait_for, 2)
        await webhook_state(service, job_id, "delivered")
        # Another caller's job reads as unknown.
        r = await service.client.post(f"/v1/batches/{job_id}/webhook/redeliver", headers=auth(BOB))
        problem(r, 404, "not-found")
    first, again = receiver.received
    assert first.verified and again.verified and first.webhook_id == again.webhook_id
    assert first.payload["data"]["metadata"] == {"team": "a"}
    assert first.payload["data"]["links"]["self"] == f"/v1/batches/{job_id}"
    # RFC 3339 in UTC, spelled with "Z" as the reference says, at the job's end.
    stamp = first.payload["timestamp"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", stamp), stamp
    assert datetime.datetime.fromisoformat(stamp).timestamp() == clock.now


async def test_redeliver_answers_409_for_a_live_job_and_404_without_a_webhook(
    tmp_path: Path, clock: FakeClock, receiver: Receiver
) -> None:
    fetch = ScriptedFetch()
    async with running(tmp_path, fetch, clock, webhooks=sender(receiver)) as service:
        plain = (await service.submit("y"))["id"]
        await service.wait_done(plain)
        r = await service.get(plain)
        assert r.json()["webhook"] is None
        r = await service.client.post(f"/v1/batches/{plain}/webhook/redeliver", headers=auth())
        problem(r, 404, "not-found")
        job_id, release = await service.submit_held()
        r = await service.client.post(f"/v1/batches/{job_id}/webhook/redeliver", headers=auth())
        problem(r, 409, "job-live")
        release.set()


@pytest.mark.parametrize(
    ("webhook", "says"),
    [
        ("https://example.org/", "must be an object"),
        ({}, "needs"),
        ({"url": 5}, "string"),
        ({"url": "https://example.org/", "secret": "x"}, "unknown"),
        ({"url": "http://example.org/"}, "https://"),
        ({"url": "https://token@example.org/"}, "user name"),
        ({"url": "https://:secret@example.org/"}, "password"),
        ({"url": "https://user:secret@example.org/"}, "user name or password"),
        # Hosts no resolver takes: each attempt failed with a bare UnicodeError, logged with
        # a traceback, until the delivery gave up.
        ({"url": "https://ex..ample.org/"}, "host name no resolver takes"),
        ({"url": f"https://{'a' * 64}.example.org/"}, "host name no resolver takes"),
        ({"url": "https://xn--a.example.org/"}, "host name no resolver takes"),
        ({"url": "https://\u2102.example.org/"}, "host name no resolver takes"),
    ],
)
async def test_a_bad_webhook_is_422_and_creates_nothing(
    tmp_path: Path, clock: FakeClock, receiver: Receiver, webhook: object, says: str
) -> None:
    no_private = WebhookSender(receiver.secret, DestinationPolicy())
    async with running(tmp_path, ScriptedFetch(), clock, webhooks=no_private) as service:
        r = await service.client.post(
            "/v1/batches", json=body("x", webhook=webhook), headers=auth()
        )
        assert says in problem(r, 422, "invalid-request")["detail"]
        r = await service.client.get("/v1/batches", headers=auth())
        assert r.json()["jobs"] == []


async def test_a_webhook_url_of_2048_characters_is_taken_and_one_more_is_422(
    tmp_path: Path, clock: FakeClock, receiver: Receiver
) -> None:
    async with running(tmp_path, ScriptedFetch(), clock, webhooks=sender(receiver)) as service:
        base = receiver.url + "?pad="
        for size, status in [(2049, 422), (2048, 201)]:
            url = base + "p" * (size - len(base))
            r = await service.client.post(
                "/v1/batches", json=body("x", webhook={"url": url}), headers=auth()
            )
            assert r.status_code == status, r.text
        r = await service.get(r.json()["id"])
        assert r.json()["webhook"]["url"] == url


async def test_a_service_without_a_webhook_secret_refuses_a_webhook(
    tmp_path: Path, clock: FakeClock
) -> None:
    async with running(tmp_path, ScriptedFetch(), clock) as service:
        r = await service.client.post(
            "/v1/batches", json=body("x", webhook={"url": "https://example.org/"}), headers=auth()
        )
        assert "no webhooks" in problem(r, 422, "invalid-request")["detail"]


def test_serve_with_a_webhook_secret_file_posts_signed_events(
    tmp_path: Path, webhook_ca: trustme.CA
) -> None:
    with receiving(webhook_ca, tls=False) as receiver:
        secret = tmp_path / "webhook-secret"
        secret.write_text(receiver.secret + "\n")
        proc, url = start_server(tmp_path, "--webhook-secret-file", str(secret), "--allow-private")
        try:
            r = httpx.post(
                f"{url}/v1/batches",
                json=body("x", webhook={"url": receiver.url}),
                headers=auth(ALICE),
            )
            assert r.status_code == 201, r.text
            (got,) = receiver.wait_for(1)
        finally:
            stop_server(proc)
    assert got.verified and got.answered == 204 and got.payload["type"] == "job.done"


def test_serve_refuses_a_bad_webhook_secret_file(tmp_path: Path) -> None:
    secret = tmp_path / "webhook-secret"
    secret.write_text("not-a-secret\n")
    args = ["serve", "--db", str(tmp_path / "jobs.db"), "--caller-header", "X-User"]
    done = run_cli([*args, "--webhook-secret-file", str(secret)], stdin=None, env=os.environ)
    assert done.returncode == 2
    assert "whsec_" in done.stderr and "not-a-secret" not in done.stderr


async def test_a_resubmit_with_a_new_or_changed_webhook_is_a_409_not_a_silent_reuse(
    tmp_path: Path, clock: FakeClock, receiver: Receiver
) -> None:
    fetch = ScriptedFetch()
    other = receiver.url.replace("/hook", "/other")
    async with running(tmp_path, fetch, clock, webhooks=sender(receiver)) as service:

        async def submit(**extra: Any) -> httpx.Response:
            return await service.client.post("/v1/batches", json=body("x", **extra), headers=auth())

        first = await submit()
        assert first.status_code == 201, first.text
        added = problem(await submit(webhook={"url": receiver.url}), 409, "webhook-conflict")
        assert first.json()["id"] in added["detail"] and "no webhook" in added["detail"]
        assert added["job"] == f"/v1/batches/{first.json()['id']}"
        hooked = await submit(metadata={"k": "v"}, webhook={"url": receiver.url})
        assert hooked.status_code == 201, hooked.text
        same = await submit(metadata={"k": "v"}, webhook={"url": receiver.url})
        assert (same.status_code, same.json()["id"]) == (200, hooked.json()["id"])
        changed = await submit(metadata={"k": "v"}, webhook={"url": other})
        assert "another webhook" in problem(changed, 409, "webhook-conflict")["detail"]
        # Without a webhook asked for, the reuse stands as it always has.
        assert (await submit(metadata={"k": "v"})).status_code == 200


@pytest.mark.parametrize("char", ["\r\n", "\n", "\x1b", "\x00", "\u202e", "\ud800"])
async def test_a_webhook_url_with_a_control_character_is_refused_with_422(
    tmp_path: Path, clock: FakeClock, receiver: Receiver, char: str
) -> None:
    fetch = ScriptedFetch()
    url = receiver.url + "?x=" + char + "Injected: 1"
    async with running(tmp_path, fetch, clock, webhooks=sender(receiver)) as service:
        hook = json.dumps(url)  # a lone surrogate as an escape: httpx would not encode it
        text = '{"targets": [{"url": "https://example.test/x"}], "webhook": {"url": ' + hook + "}}"
        r = await service.client.post(
            "/v1/batches",
            content=text,
            headers={**auth(), "Content-Type": "application/json"},
        )
        detail = problem(r, 422, "invalid-request")["detail"]
        assert f"U+{ord(char[0]):04X}" in detail
        assert (await service.client.get("/v1/batches", headers=auth())).json()["jobs"] == []


async def test_a_retry_tells_its_parents_webhook_or_the_one_its_body_sets(
    tmp_path: Path, clock: FakeClock, receiver: Receiver
) -> None:
    fetch = ScriptedFetch()
    other = receiver.url.replace("/hook", "/other")
    async with running(tmp_path, fetch, clock, webhooks=sender(receiver)) as service:

        async def ended(*names: str) -> str:
            r = await service.client.post(
                "/v1/batches", json=body(*names, webhook={"url": receiver.url}), headers=auth()
            )
            assert r.status_code == 201, r.text
            await service.wait_done(r.json()["id"])
            return str(r.json()["id"])

        async def retry(job_id: str, **extra: Any) -> httpx.Response:
            return await service.client.post(
                f"/v1/batches/{job_id}/retry", json=extra, headers=auth()
            )

        async def webhook_of(r: httpx.Response) -> Any:
            assert r.status_code == 201, r.text
            return (await service.get(r.json()["id"])).json()["webhook"]

        inherited = await webhook_of(await retry(await ended("a", "b/fail")))
        assert inherited["url"] == receiver.url
        parent = await ended("c", "d/fail")
        assert (await webhook_of(await retry(parent, webhook={"url": other})))["url"] == other
        again = await retry(parent, webhook={"url": receiver.url})
        problem(again, 409, "webhook-conflict")
        assert await webhook_of(await retry(await ended("e", "f/fail"), webhook=None)) is None


def test_the_receiver_stops_with_a_client_that_never_said_hello(webhook_ca: trustme.CA) -> None:
    """The receiver's TLS handshake ran in its accept loop: a delivery cut between its TCP
    connect and its TLS hello (a service stopped at the end of a test) held the receiver's
    shutdown for ever, until pytest-timeout failed the test."""
    stopped = threading.Event()

    def serve_then_stop() -> None:
        with receiving(webhook_ca) as receiver:
            silent = socket.create_connection(("127.0.0.1", receiver.server_address[1]))
            with receiver.changed:
                assert receiver.changed.wait_for(lambda: receiver.connections >= 1, 60)
        silent.close()
        stopped.set()

    thread = threading.Thread(target=serve_then_stop, daemon=True)
    thread.start()
    assert stopped.wait(60), "the receiver never stopped"  # a bound against a hang only
