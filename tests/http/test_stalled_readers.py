"""A client that stops reading an answer (an event stream, an export) is let go: the
server gives up on a write that makes no progress, closes the connection and ends the answer,
rather than hold the request's task (and the job's watch) while the client stays connected."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio
import trio.testing

from trio_batch import Config, Result

from ..support.fakes import FakeClock, ScriptedFetch
from ..support.http_fixtures import ALICE
from .test_http import running

CONFIG = Config(ttl=1_000_000, targets_per_job=500, jobs_per_caller=2, jobs_total=4)
#: Enough bytes of events to fill every socket buffer between a client that reads nothing.
TARGETS = 200
BIG = "x" * 60_000


@pytest.mark.parametrize("path", ["events", "results.jsonl"])
async def test_an_answer_nobody_reads_is_cut_and_its_connection_closed(
    path: str,
    tmp_path: Path,
    fetch: ScriptedFetch,
    clock: FakeClock,
    mock_clock: trio.testing.MockClock,
) -> None:
    names = [f"p/{i}" for i in range(TARGETS)]
    for name in names:
        fetch.custom[f"https://example.test/{name}"] = lambda: Result(BIG)
    async with running(tmp_path, fetch, clock, config=CONFIG) as s:
        job = await s.submit(*names)
        await s.wait_done(job["id"])
        host, port = s.url.removeprefix("http://").split(":")
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect((host, int(port)))
        stream = trio.SocketStream(sock)
        async with stream:
            head = f"GET /v1/batches/{job['id']}/{path} HTTP/1.1\r\nHost: x\r\n"
            head += f"Authorization: Bearer {ALICE}\r\nConnection: close\r\n\r\n"
            await stream.send_all(head.encode())
            # Once the server waits on the full buffers, a virtual day passes unread.
            await trio.testing.wait_all_tasks_blocked(cushion=0.2)
            mock_clock.jump(86400)
            await trio.testing.wait_all_tasks_blocked(cushion=0.2)
            data = b""
            try:
                while chunk := await stream.receive_some(1 << 20):
                    data += chunk
            except trio.BrokenResourceError:
                pass  # a reset is a close too
    assert data.startswith(b"HTTP/1.1 200")
    # Cut off, not sent whole once the client read again: no last chunk ends it.
    assert not data.endswith(b"\r\n0\r\n\r\n")
    assert path != "events" or b"event: job" not in data
