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


async def test_the_documented_bounds_of_numbers_in_requests_are_the_ones_the_service_keeps(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # The document said only "minimum": a created_after past the year 9999 and an after of
    # eleven digits passed it, and were refused.
    async with running(tmp_path, fetch, clock) as svc:
        doc = (await svc.client.get("/openapi.json")).json()
        when = doc["components"]["schemas"]["BulkCancelRequest"]["properties"]["created_after"]
        latest = when["anyOf"][0]["maximum"]
        lines = doc["paths"]["/v1/batches/{id}/results.jsonl"]["get"]["parameters"]
        most = {p["name"]: p for p in lines}["after"]["schema"]["maximum"]
        job_id = (await svc.submit("a"))["id"]
        await svc.wait_done(job_id)
        for after, status in ((latest, 200), (latest + 1, 422)):
            cancel = {"created_after": after, "dry_run": True}
            r = await svc.client.post("/v1/batches/cancel", json=cancel, headers=auth())
            assert r.status_code == status, (after, r.text)
        for index, status in ((most, 200), (most + 1, 422)):
            url = f"/v1/batches/{job_id}/results.jsonl?after={index}"
            r = await svc.client.get(url, headers=auth())
            assert r.status_code == status, (index, r.text)
