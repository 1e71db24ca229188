"""Behind ``--caller-header``, a submit without ``caller_class`` gets the class the service
uses by default, and the reverse-proxy guide names that same class."""

from __future__ import annotations

import re
from pathlib import Path

from trio_batch.http._auth import DEFAULT_CALLER_CLASS, HeaderAuth

from ..support.fakes import FakeClock, ScriptedFetch
from .test_http import body, running

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
