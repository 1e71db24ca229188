"""Streamed answers (``results.jsonl``, a big target) end as HTTP says they should: a client
that asked to close, or speaks HTTP/1.0, sees the connection closed after the last byte; a
stream whose job is lost midway ends as an error, never as a complete body."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from trio_batch import Config, Store
from trio_batch.store.sqlite._job_store import SQLiteJobStore

from ..support.fakes import FakeClock, ScriptedFetch
from ..support.http_fixtures import ALICE
from .test_http import auth, running

CONFIG = Config(ttl=100, targets_per_job=500, jobs_per_caller=2, jobs_total=4)


async def _read_to_eof(url: str, request: bytes) -> bytes:
    """Send ``request`` on a fresh connection and read until the server closes it."""
    host, port = url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(request)
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


@pytest.mark.parametrize("path", ["results.jsonl", "targets/0"])
@pytest.mark.parametrize("version, connection", [("1.1", "close"), ("1.0", None), ("1.0", "close")])
async def test_a_streamed_answer_closes_the_connection_when_asked(
    tmp_path: Path,
    fetch: ScriptedFetch,
    clock: FakeClock,
    version: str,
    connection: str | None,
    path: str,
) -> None:
    async with running(tmp_path, fetch, clock, config=CONFIG) as s:
        job = await s.submit(*(f"p/{i}" for i in range(40)))
        await s.wait_done(job["id"])
        head = f"GET /v1/batches/{job['id']}/{path} HTTP/{version}\r\nHost: x\r\n"
        head += f"Authorization: Bearer {ALICE}\r\n"
        if connection:
            head += f"Connection: {connection}\r\n"
        with trio.fail_after(30):  # against a hang: the server must close, the test not wait
            data = await _read_to_eof(s.url, (head + "\r\n").encode())
    status, _, body = data.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 200"), status
    assert body.count(b'{"idx":') == (40 if path == "results.jsonl" else 1)


@pytest.mark.parametrize("how", ["deleted", "purged"])
async def test_an_export_whose_job_goes_midway_is_cut_not_ended(
    tmp_path: Path,
    fetch: ScriptedFetch,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    # The second page is held until the job is gone (forgotten, or its lease lapsed).
    gate, asked = trio.Event(), trio.Event()
    real = SQLiteJobStore.get_targets_after

    async def held(self: SQLiteJobStore, job_id: str, after: int, **kw: Any) -> Any:
        if after >= 0 and not gate.is_set():
            asked.set()
            await gate.wait()
        return await real(self, job_id, after, **kw)

    monkeypatch.setattr(SQLiteJobStore, "get_targets_after", held)
    async with running(tmp_path, fetch, clock, config=CONFIG) as s:
        job = await s.submit(*(f"p/{i}" for i in range(300)))
        await s.wait_done(job["id"])
        got = b""

        async def go() -> None:
            await asked.wait()
            if how == "deleted":
                gone = await s.client.delete(f"/v1/batches/{job['id']}", headers=auth())
                assert gone.status_code == 204
            else:  # the lease lapses and the purge deletes the job
                clock.advance(CONFIG.ttl + 1)
                with Store.open(s.db) as store:
                    assert store.purge_expired(now=clock.now) >= 1
            gate.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(go)
            with pytest.raises(httpx.RemoteProtocolError, match="incomplete"):
                async with s.client.stream(
                    "GET", f"/v1/batches/{job['id']}/results.jsonl", headers=auth()
                ) as r:
                    assert r.status_code == 200
                    async for data in r.aiter_bytes():
                        got += data
        assert got.count(b"\n") < 300
        # The service goes on answering.
        assert (await s.client.get("/healthz")).status_code == 200
