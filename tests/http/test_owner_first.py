"""Another caller's job is refused before anything of it but its row is read: its targets and
results are never loaded, so it answers 404 as an unknown id does (in work, so in time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trio_batch.runner import Runner

from ..support.fakes import FakeClock, ScriptedFetch
from ..support.http_fixtures import BOB
from .test_http import auth, problem, running


@pytest.mark.parametrize(("path", "read"), [("", "overview"), ("/targets/0", "target")])
async def test_another_callers_job_is_refused_before_its_targets_are_read(
    tmp_path: Path,
    fetch: ScriptedFetch,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    read: str,
) -> None:
    reads: list[str] = []
    real = getattr(Runner, read)

    async def spied(self: Runner, job_id: str, *args: Any) -> Any:
        reads.append(job_id)
        return await real(self, job_id, *args)

    monkeypatch.setattr(Runner, read, spied)
    async with running(tmp_path, fetch, clock) as s:
        job = await s.submit("a")
        await s.wait_done(job["id"])
        reads.clear()
        theirs = await s.client.get(f"/v1/batches/{job['id']}{path}", headers=auth(BOB))
        problem(theirs, 404, "not-found")
        assert reads == []
        mine = await s.client.get(f"/v1/batches/{job['id']}{path}", headers=auth())
        assert mine.status_code == 200 and reads == [job["id"]]
