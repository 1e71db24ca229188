"""Behind ``--caller-header``, a submit without ``caller_class`` gets the class the service
uses by default, and the reverse-proxy guide names that same class."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trio_batch.http._auth import DEFAULT_CALLER_CLASS, HeaderAuth

from ..support.fakes import FakeClock, ScriptedFetch
from .test_http import body, problem, running

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "reverse-proxy.md"


async def test_the_default_class_behind_a_caller_header_is_the_one_the_guide_names(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock, auth=HeaderAuth("X-Caller")) as s:
        r = await s.client.post("/v1/batches", json=body("a"), headers={"X-Caller": "carol"})
        assert r.status_code == 201, r.text
        assert r.json()["caller_class"] == DEFAULT_CALLER_CLASS
    text = " ".join(GUIDE.read_text().split())
    named = re.search(r'request body names \(`"caller_class"`\), or `([^`]+)`', text)
    assert named is not None and named.group(1) == DEFAULT_CALLER_CLASS


@pytest.mark.parametrize("name", ["josé", "a…b", "名前"])
async def test_a_caller_header_is_read_as_utf8(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, name: str
) -> None:
    # The header's bytes were read as Latin-1: "josé" was stored as "josÃ©", another caller
    # than the CLI's or a token's "josé", and "…" (whose UTF-8 holds \x80) was refused.
    async with running(tmp_path, fetch, clock, auth=HeaderAuth("X-Caller")) as s:
        headers = [(b"X-Caller", name.encode()), (b"Content-Type", b"application/json")]
        r = await s.client.post("/v1/batches", content=json.dumps(body("a")), headers=headers)
        assert r.status_code == 201, r.text
        assert r.json()["caller"] == name
        r = await s.client.get(f"/v1/batches/{r.json()['id']}", headers=headers)
        assert r.status_code == 200, r.text


async def test_a_caller_header_that_is_not_utf8_is_refused(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock, auth=HeaderAuth("X-Caller")) as s:
        headers = [(b"X-Caller", b"jos\xe9"), (b"Content-Type", b"application/json")]
        r = await s.client.post("/v1/batches", content=json.dumps(body("a")), headers=headers)
        assert problem(r, 401, "unauthorized")
    assert fetch.calls == []
