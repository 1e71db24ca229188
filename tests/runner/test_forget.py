"""Forgetting a finished job: the runner, the store, the service's DELETE and the command
(issue 12: a refused rerun after Ctrl-C left the user stuck until the lease lapsed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_batch import Config, JobLive, JobState, SQLiteJobStore, Store, open_runner

from ..http.test_http import auth, body, problem, running
from ..support.fakes import FakeClock, ScriptedFetch, urls

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=1, jobs_total=3)


async def test_a_forgotten_job_can_be_submitted_afresh(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls("a", "gate", "c")
    started, release = fetch.gate(targets[1].url)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        with pytest.raises(JobLive):
            await runner.forget(job_id)  # live
        assert await runner.cancel(job_id)
        with pytest.raises(JobLive):
            await runner.forget(job_id)  # cancelled, but its in-flight target is being stored
        release.set()
        await runner.wait(job_id)
        again, reused = await runner.submit("alice", "user", targets)
        assert (again, reused) == (job_id, True)  # the stored job, nothing fetched
        assert await runner.forget(job_id, caller="bob") is None  # not bob's
        forgotten = await runner.forget(job_id, caller="alice")
        assert forgotten is not None and forgotten.status == JobState.CANCELLED
        assert await runner.status(job_id) is None
        assert await runner.forget(job_id) is None  # already gone
        fresh, reused = await runner.submit("alice", "user", targets)
        assert not reused and fresh != job_id
        job = await runner.wait(fresh)
    assert job is not None and job.status == JobState.DONE
    assert fetch.calls == [t.url for t in targets[:2]] + [t.url for t in targets]


async def test_the_store_forgets_in_one_transaction_and_only_terminal_jobs(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("a", "b"))
        await runner.wait(job_id)
    job_store = SQLiteJobStore(store)
    assert await job_store.forget_job("not an id", now=clock()) is None
    assert await job_store.forget_job(job_id, caller="bob", now=clock()) is None
    assert store.get_job(job_id, now=clock()) is not None
    job = await job_store.forget_job(job_id, now=clock())
    assert job is not None and job.id == job_id
    rows = store.db.execute("SELECT count(*) FROM targets WHERE job_id = ?", (job_id,))
    assert rows.fetchone()[0] == 0
    assert store.get_job(job_id, now=clock()) is None


async def test_delete_forgets_the_callers_own_finished_job(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    from ..support.http_fixtures import BOB

    async with running(tmp_path, fetch, clock) as svc:
        job_id, release = await svc.submit_held("b")
        problem(await svc.client.delete(f"/v1/batches/{job_id}", headers=auth()), 409, "job-live")
        release.set()
        await svc.wait_done(job_id)
        r = await svc.client.delete(f"/v1/batches/{job_id}", headers=auth(BOB))
        problem(r, 404, "not-found")  # bob's DELETE reads like an unknown job ...
        assert (await svc.get(job_id)).status_code == 200  # ... and deletes nothing
        r = await svc.client.delete(f"/v1/batches/{job_id}", headers=auth())
        assert r.status_code == 204 and r.content == b""
        problem(await svc.get(job_id), 404, "not-found")
        r = await svc.client.post("/v1/batches", json=body("gate", "b"), headers=auth())
        assert r.status_code == 201 and r.json()["id"] != job_id  # submitted afresh


async def test_another_callers_live_job_reads_as_unknown_to_forget(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # The caller is checked before the drains: a JobLive for bob would tell him the job exists.
    targets = urls("gate", "b")
    started, release = fetch.gate(targets[0].url)
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()
        assert await runner.forget(job_id, caller="bob") is None
        with pytest.raises(JobLive):
            await runner.forget(job_id, caller="alice")
        release.set()
        await runner.wait(job_id)


async def test_delete_of_another_callers_live_job_is_404_like_an_unknown_id(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    from ..support.http_fixtures import BOB

    async with running(tmp_path, fetch, clock) as svc:
        job_id, release = await svc.submit_held("b")
        unknown = "A" * 22
        for path in (f"/v1/batches/{job_id}", f"/v1/batches/{unknown}"):
            problem(await svc.client.delete(path, headers=auth(BOB)), 404, "not-found")
        release.set()
        await svc.wait_done(job_id)
