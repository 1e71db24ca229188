"""Helpers for the HTTP service tests: a fetch function for ``--fetch`` and small clients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import trio

from trio_batch import Result, Target

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"
REPO = Path(__file__).resolve().parents[2]


class Failed(Exception):
    """A fetch failure with a hint."""

    hint = "it was meant to fail"


async def fetch(target: Target) -> Result:
    """A fetch function for a service in a subprocess (``--fetch tests.http_fixtures:fetch``).

    The URL's last path segment picks the behaviour: ``hang`` never returns, ``fail`` raises,
    anything else returns ``content of <url>`` at once.
    """
    await trio.lowlevel.checkpoint()
    kind = target.url.rsplit("/", 1)[-1]
    if kind == "hang":
        await trio.sleep_forever()
    if kind == "fail":
        raise Failed(f"cannot fetch {target.url}")
    return Result(f"content of {target.url}", {"url": target.url})


not_a_function = 42


async def sse_events(
    source: httpx.Response | AsyncIterator[str],
) -> AsyncIterator[dict[str, Any]]:
    """Parse a Server-Sent Events stream: yields ``{"event", "id"?, "data"}`` per event.

    ``source`` is a streamed response, or the line iterator of one already partly read.
    """
    lines = source.aiter_lines() if isinstance(source, httpx.Response) else source
    event: dict[str, Any] = {}
    async for line in lines:
        if not line:
            if event:
                if "data" in event:
                    event["data"] = json.loads(event["data"])
                yield event
                event = {}
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        event[key] = value.removeprefix(" ")


def start_server(
    tmp_path: Path,
    *extra: str,
    fetch: str | None = "tests.support.http_fixtures:fetch",
    caller_header: str | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """Start ``trio-batch serve`` on a free port; returns the process and its URL.

    ``fetch`` is the ``--fetch`` function; None serves with the built-in fetcher. Callers are
    ALICE's and BOB's tokens, or with ``caller_header`` whoever that header names. ``env`` is
    added to this process's environment.
    """
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ALICE} alice user\n{BOB} bob user\n")
    who = ["--tokens", str(tokens)] if caller_header is None else ["--caller-header", caller_header]
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("trio-batch")),  # the installed console script
            "serve",
            "--db",
            str(tmp_path / "jobs.db"),
            "--bind",
            "127.0.0.1:0",
            *who,
            *(("--fetch", fetch) if fetch is not None else ()),
            *extra,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise AssertionError(f"no 'listening on' line: {line!r}; stderr: {proc.communicate()[1]}")
    return proc, line.removeprefix("listening on ").strip()


def stop_server(proc: subprocess.Popen[str]) -> str:
    """Stop a server from :func:`start_server` with SIGTERM; check it exits 0; returns stderr."""
    proc.terminate()
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hang is reported below
        proc.kill()
        _, stderr = proc.communicate()
    assert proc.returncode == 0, stderr
    return stderr
