"""A fetch function's ``meta`` nested deeper than :data:`~trio_batch._json.MAX_DEPTH`: its
target fails with a clear error when the result is stored, so every answer that shows the job
later can be encoded, whatever the stack it is encoded on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trio_batch import Result

from ..support.fakes import FakeClock, ScriptedFetch
from .test_http import Service, auth, running


async def until_ended(svc: Service, job_id: str) -> None:
    """Follow the job's event stream to its terminal ``job`` event, decoding none of the
    events (a client's own decoder has the same limit)."""
    url = f"/v1/batches/{job_id}/events"
    async with svc.client.stream("GET", url, headers=auth()) as r:
        async for line in r.aiter_lines():
            if line == "event: job":
                return


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [300, 950])
async def test_a_meta_nested_too_deep_fails_its_target_and_every_answer_is_whole(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, depth: int
) -> None:
    # 950 levels were stored (the store thread's stack is shallow), then results.jsonl failed
    # with RecursionError encoding it again deep in the server's stack: a 500 halfway
    # through the answer, and the connection cut.
    fetch.custom["https://example.test/deep"] = lambda: Result("x", {"n": nested(depth)})
    async with running(tmp_path, fetch, clock) as svc:
        job_id = (await svc.submit("deep", "a"))["id"]
        await until_ended(svc, job_id)
        lines = await svc.client.get(f"/v1/batches/{job_id}/results.jsonl", headers=auth())
        assert lines.status_code == 200
        deep, plain = (json.loads(line) for line in lines.text.splitlines())
        assert deep["status"] == "failed" and "nests more than 255 levels" in deep["error"]
        assert plain["status"] == "done"
        job = (await svc.client.get(f"/v1/batches/{job_id}", headers=auth())).json()
        assert (job["status"], job["targets_failed"]) == ("partial", 1)


async def test_a_meta_within_the_depth_is_stored_and_served(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    fetch.custom["https://example.test/deep"] = lambda: Result("x", {"n": nested(254)})
    async with running(tmp_path, fetch, clock) as svc:
        job_id = (await svc.submit("deep"))["id"]
        assert (await svc.wait_done(job_id))["status"] == "done"
        r = await svc.client.get(f"/v1/batches/{job_id}/targets/0", headers=auth())
        assert r.status_code == 200
        assert r.json()["result"]["meta"]["n"] == nested(254)
