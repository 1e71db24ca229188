"""``"snapshot"`` and ``"replay"`` on ``POST /v1/batches``, and ``/v1/batches/{id}/pin``, against
a real server fetching the fake site with the built-in fetcher; replays run with it stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from trio_batch import Target
from trio_batch.fetchers import HttpFetcher, SnapshotStore

from ..support.fakes import FakeClock
from ..support.http_fixtures import BOB
from ..support.local_server import LocalServer, server
from .test_http import Service, auth, problem, running

__all__ = ["server"]  # the fixture, imported for pytest


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def fetcher(tmp_path: Path) -> HttpFetcher:
    return HttpFetcher(snapshots=SnapshotStore(tmp_path / "jobs.db.snapshots"))


async def submitted(svc: Service, payload: dict[str, Any], token: str | None = None) -> str:
    headers = auth() if token is None else auth(token)
    r = await svc.client.post("/v1/batches", json=payload, headers=headers)
    assert r.status_code == 201, r.text
    job_id: str = r.json()["id"]
    done = await svc.wait_done(job_id, **({} if token is None else {"token": token}))
    assert done["status"] == "done", done
    return job_id


async def test_record_pin_and_replay_by_another_caller_offline(
    server: LocalServer, tmp_path: Path, clock: FakeClock
) -> None:
    page = server.url("/page.html")
    async with running(tmp_path, fetcher(tmp_path), clock) as svc:
        recorded = await submitted(svc, {"targets": [{"url": page}], "snapshot": True})
        r = await svc.client.post(
            f"/v1/batches/{recorded}/pin", json={"shared": True}, headers=auth(BOB)
        )
        problem(r, 404, "not-found")  # Bob cannot pin Alice's job
        r = await svc.client.post(
            f"/v1/batches/{recorded}/pin", json={"shared": True}, headers=auth()
        )
        assert r.status_code == 200, r.text
        assert r.json() == {"job": recorded, "pinned": True, "shared": True}
        server.shutdown()
        server.server_close()
        again = {"url": page, "options": {"mode": "text", "grep": "pears"}}
        replay = await submitted(svc, {"targets": [again], "replay": {"job": recorded}}, token=BOB)
        r = await svc.client.get(f"/v1/batches/{replay}/targets/0", headers=auth(BOB))
        assert r.status_code == 200, r.text
        result = r.json()["result"]
        assert result["content"] == "The second paragraph mentions pears."
        assert result["meta"]["replayed"] is True and result["meta"]["replay"] == recorded
        r = await svc.client.get("/metrics")
        assert 'trio_batch_fetch_snapshot_responses_total{outcome="recorded"} 1.0' in r.text
        assert 'trio_batch_fetch_snapshot_responses_total{outcome="replayed"} 1.0' in r.text
        r = await svc.client.delete(f"/v1/batches/{recorded}/pin", headers=auth())
        assert r.status_code == 204, r.text
        r = await svc.client.post(
            "/v1/batches",
            json={"targets": [{"url": page}], "replay": {"job": recorded}},
            headers=auth(BOB),
        )
        detail = problem(r, 422, "invalid-request")["detail"]
        assert detail == f"no job {recorded} to replay (unknown id, or its lease has lapsed)"


async def test_bad_replays_are_422_at_submit_saying_which(
    server: LocalServer, tmp_path: Path, clock: FakeClock
) -> None:
    page = server.url("/page.html")
    async with running(tmp_path, fetcher(tmp_path), clock) as svc:
        recorded = await submitted(svc, {"targets": [{"url": page}], "snapshot": True})
        plain = await submitted(svc, {"targets": [{"url": server.url("/text.txt")}]})
        before = server.count("/page.html")

        async def refused(payload: dict[str, Any], token: str | None = None) -> str:
            headers = auth() if token is None else auth(token)
            r = await svc.client.post("/v1/batches", json=payload, headers=headers)
            detail: str = problem(r, 422, "invalid-request")["detail"]
            return detail

        targets = [{"url": page}]
        unknown = "U" * 22
        as_unknown = await refused({"targets": targets, "replay": {"job": unknown}})
        assert as_unknown.startswith(f"no job {unknown} to replay")
        r = await svc.client.post(
            "/v1/batches", json={"targets": targets, "replay": {"job": unknown}}, headers=auth()
        )
        assert "snapshot: true" in r.json()["hint"]
        others = await refused({"targets": targets, "replay": {"job": recorded}}, BOB)
        assert others == as_unknown.replace(unknown, recorded)
        none = await refused({"targets": targets, "replay": {"job": plain}})
        assert none.startswith(f"job {plain} has no snapshot to replay")
        shape = await refused({"targets": targets, "replay": {"job": 5}})
        assert "replay's 'job' must be a job id" in shape
        miss = await refused({"targets": targets, "replay": {"job": recorded, "on_miss": "x"}})
        assert "'on_miss' is 'fail' or 'fetch'" in miss
        flag = await refused({"targets": targets, "snapshot": "yes"})
        assert "'snapshot' must be true or false" in flag
        # Set on the target itself, the replay is checked all the same.
        sneaked = [{"url": page, "options": {"replay": recorded}}]
        assert await refused({"targets": sneaked}, BOB) == others
        assert server.count("/page.html") == before


async def test_snapshot_warc_download_is_streamed_and_its_digests_match_meta(
    server: LocalServer, tmp_path: Path, clock: FakeClock
) -> None:
    import base64
    import io

    from warcio.archiveiterator import ArchiveIterator

    page = server.url("/page.html")
    async with running(tmp_path, fetcher(tmp_path), clock) as svc:
        recorded = await submitted(svc, {"targets": [{"url": page}], "snapshot": True})
        r = await svc.client.get(f"/v1/batches/{recorded}/targets/0", headers=auth())
        meta = r.json()["result"]["meta"]
        r = await svc.client.get(f"/v1/batches/{recorded}/snapshot.warc.gz", headers=auth(BOB))
        problem(r, 404, "not-found")
        r = await svc.client.get(f"/v1/batches/{recorded}/snapshot.warc.gz", headers=auth())
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/gzip"
    records = list(ArchiveIterator(io.BytesIO(r.content), check_digests=True))
    assert [rec.rec_type for rec in records] == ["response", "request"]
    digest = records[0].rec_headers.get_header("WARC-Payload-Digest")
    assert digest == "sha256:" + base64.b32encode(bytes.fromhex(meta["sha256"])).decode()


def _lose_the_body(root: Path) -> None:
    """Delete the one body file under ``root``: a snapshot directory damaged by hand."""
    [blob] = [p for p in root.rglob("blobs/*/*") if p.is_file()]
    blob.unlink()


async def test_a_snapshot_missing_a_body_answers_a_problem_before_any_record(
    server: LocalServer, tmp_path: Path, clock: FakeClock
) -> None:
    page = server.url("/page.html")
    async with running(tmp_path, fetcher(tmp_path), clock) as svc:
        recorded = await submitted(svc, {"targets": [{"url": page}], "snapshot": True})
        await trio.to_thread.run_sync(_lose_the_body, tmp_path)
        r = await svc.client.get(f"/v1/batches/{recorded}/snapshot.warc.gz", headers=auth())
        problem(r, 500, "snapshot-damaged")
        assert f"the snapshot of job {recorded} cannot give {page}: its body is missing" in r.text


async def test_the_service_collects_lapsed_snapshots_every_purge_interval(
    tmp_path: Path, clock: FakeClock
) -> None:
    from trio_batch import JobState, open_store
    from trio_batch.fetchers._body import Body
    from trio_batch.fetchers._snapshot_entry import Entry
    from trio_batch.http._snapshots import collect_periodically
    from trio_batch.store import NewJob

    snaps = SnapshotStore(tmp_path / "snaps")
    rounds: list[tuple[int, int]] = []
    send, receive = trio.open_memory_channel[None](100)

    def on_round(removed: int, bodies: int) -> None:
        rounds.append((removed, bodies))
        send.send_nowait(None)

    async with open_store(str(tmp_path / "jobs.db")) as store:
        new = NewJob(
            "alice",
            "user",
            [Target("https://example.test/")],
            ttl=100,
            targets_per_job=1,
            jobs_per_caller=1,
            jobs_total=1,
            status=JobState.RUNNING,
        )
        job, _ = await store.create_job(new, now=clock())
        body = Body("https://example.test/", 200, "text/plain", None, b"kept", 0)
        snaps.record_sync(job.id, "alice", Entry.of(body.url, body, clock()), body.data)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect_periodically, snaps, store, clock, 0.001, on_round)
            await receive.receive()  # a round while the job is live: its snapshot stays
            assert rounds[0] == (0, 0) and snaps.job_ids() == [job.id]
            clock.advance(101)  # the lease lapses
            while sum(removed for removed, _ in rounds) == 0:
                await receive.receive()
            assert snaps.job_ids() == []
            nursery.cancel_scope.cancel()
