"""Numbers in requests (query strings): one past any float or in other digits is a 422 that
says what to send, never read as infinity or as the digits it resembles."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support.fakes import FakeClock, ScriptedFetch
from .test_http import auth, problem, running


@pytest.mark.parametrize("when", ["1e400", "9" * 400, "1e309", "\u0663", "1_0", "nan", "-1"])
async def test_a_list_cursor_whose_time_no_float_holds_is_refused(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, when: str
) -> None:
    # 1e400 (and 400 nines) read as infinity: the first page again, as if the cursor were
    # one this service gave.
    async with running(tmp_path, fetch, clock) as svc:
        job_id = (await svc.submit("a"))["id"]
        r = await svc.client.get(f"/v1/batches?cursor={when}~{job_id}", headers=auth())
        assert "cursor is not one this service gave" in problem(r, 422, "invalid-request")["detail"]


async def test_the_next_link_the_service_gives_is_taken(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as svc:
        for name in ("a", "b"):
            await svc.wait_done((await svc.submit(name))["id"])
            clock.advance(1)
        first = (await svc.client.get("/v1/batches?limit=1", headers=auth())).json()
        second = await svc.client.get(first["next"], headers=auth())
        assert second.status_code == 200, second.text
        assert [j["id"] for j in second.json()["jobs"]] != [j["id"] for j in first["jobs"]]
