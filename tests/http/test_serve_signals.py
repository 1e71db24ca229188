"""``trio-batch serve`` and a second signal: SIGTERM or SIGINT again during the graceful
shutdown stops it at once, yet still as a shutdown (live jobs marked, exit status 0), never
as the signal's default (killed, its jobs left running) or a KeyboardInterrupt traceback."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import httpx
import pytest

from trio_batch import JobState, Store

from ..support.http_fixtures import BOB, start_server


def _hold_a_request_open(url: str) -> socket.socket:
    """A connection whose POST sent its headers and part of its body, then nothing: the
    graceful shutdown waits for it. Answered requests on another connection after it show
    the server has accepted it (connections are accepted in order)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    held = socket.create_connection((host, int(port)))
    held.sendall(
        b"POST /v1/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + BOB.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    return held


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_during_the_graceful_shutdown_stops_at_once_and_marks_jobs(
    tmp_path: Path, signum: signal.Signals
) -> None:
    proc, url = start_server(tmp_path)
    assert proc.stderr is not None
    try:
        held = _hold_a_request_open(url)
        with httpx.Client(base_url=url) as client:
            job = {"targets": [{"url": "https://example.test/hang"}]}
            r = client.post("/v1/batches", json=job, headers={"Authorization": f"Bearer {BOB}"})
            assert r.status_code == 201, r.text
            live_id = r.json()["id"]
        proc.send_signal(signum)
        seen = []
        for line in proc.stderr:  # the graceful shutdown has begun; the held request waits
            seen.append(line)
            if "shutting down" in line:
                break
        proc.send_signal(signum)
        _, rest = proc.communicate(timeout=60)
        held.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    stderr = "".join(seen) + rest
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "stopping now" in stderr
    with Store.open(tmp_path / "jobs.db") as store:
        live = store.get_job(live_id)
    assert live is not None and (live.status, live.error) == (JobState.FAILED, "shutdown")
