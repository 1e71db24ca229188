"""``POST /v1/batches/{id}/pin``'s optional body: whether there is one is what arrives, not how
the Content-Length header is spelled; a chunked ``{"shared": true}`` is read, not dropped."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from trio_batch.fetchers import HttpFetcher, SnapshotStore

from ..support.fakes import FakeClock
from ..support.local_server import LocalServer, server
from .test_http import auth, running
from .test_http_snapshots import submitted

__all__ = ["server"]  # the fixture, imported for pytest


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def test_a_chunked_pin_body_is_read(
    server: LocalServer, tmp_path: Path, clock: FakeClock
) -> None:
    # Sent without a Content-Length (chunked), {"shared": true} was never read: the snapshot
    # was pinned unshared, and the answer said so without a word of why.
    fetch = HttpFetcher(snapshots=SnapshotStore(tmp_path / "jobs.db.snapshots"))
    async with running(tmp_path, fetch, clock) as svc:
        job = await submitted(
            svc, {"targets": [{"url": server.url("/page.html")}], "snapshot": True}
        )
        headers = {**auth(), "Content-Type": "application/json"}
        body = _chunks(json.dumps({"shared": True}).encode())
        r = await svc.client.post(f"/v1/batches/{job}/pin", content=body, headers=headers)
        assert r.status_code == 200, r.text
        assert r.json() == {"job": job, "pinned": True, "shared": True}


async def test_an_empty_pin_body_whatever_its_length_is_spelled_pins_unshared(
    server: LocalServer, tmp_path: Path, clock: FakeClock
) -> None:
    # "Content-Length: 00" is 0, and was read as a body to come: 415 without a JSON type.
    fetch = HttpFetcher(snapshots=SnapshotStore(tmp_path / "jobs.db.snapshots"))
    async with running(tmp_path, fetch, clock) as svc:
        job = await submitted(
            svc, {"targets": [{"url": server.url("/page.html")}], "snapshot": True}
        )
        headers = {**auth(), "Content-Length": "00"}
        r = await svc.client.post(f"/v1/batches/{job}/pin", headers=headers)
        assert r.status_code == 200, r.text
        assert r.json() == {"job": job, "pinned": True, "shared": False}
