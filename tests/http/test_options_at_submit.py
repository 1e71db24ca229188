"""``trio-batch serve`` refuses a bad option at submit: 422 naming the option, nothing stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from ..support.http_fixtures import ALICE, start_server, stop_server

BAD_OPTIONS: list[tuple[dict[str, Any], str, str]] = [
    ({"grep": "("}, "grep", "not a valid regular expression"),
    ({"jq": ".[ "}, "jq", "does not compile"),
    ({"pages": "0"}, "pages", "pages count from 1"),
    ({"pages": "3-1"}, "pages", "backwards range 3-1"),
    ({"pages": "1" + "0" * 5000}, "pages", "is not a page range"),
    ({"mode": "pdf"}, "mode", "unknown mode 'pdf'"),
]


async def test_a_bad_option_is_a_422_naming_it_and_nothing_is_stored(tmp_path: Path) -> None:
    proc, url = start_server(tmp_path, "--allow-file", fetch=None)
    page = tmp_path / "page.txt"
    page.write_text("hello\n")
    try:
        headers = {"Authorization": f"Bearer {ALICE}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            for options, option, message in BAD_OPTIONS:
                good = {"url": page.as_uri()}
                bad = {"url": page.as_uri() + "?2", "options": options}
                r = await client.post("/v1/batches", json={"targets": [good, bad]})
                assert r.status_code == 422, r.text
                problem = r.json()
                assert problem["type"] == "urn:trio-batch:problem:invalid-targets"
                assert problem["index"] == 1
                assert problem["option"] == option
                assert message in problem["detail"]
                assert problem["hint"]
            listed = await client.get("/v1/batches")
            assert listed.status_code == 200
            assert listed.json()["jobs"] == []
    finally:
        stop_server(proc)
