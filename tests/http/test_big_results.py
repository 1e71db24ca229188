"""Big results: read in pieces made off the event loop, linked rather than inlined in event
streams, capped where they are stored (issue 26: six reads of a 50 MB result stalled
``/healthz`` for seconds; the event stream sent it inline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_batch import Config, Result, TargetState, TargetStatus
from trio_batch.http import _bodies
from trio_batch.http._events import INLINE_RESULT
from trio_batch.store.sqlite._job_store import SQLiteJobStore

from ..support.fakes import Boom, FakeClock, ScriptedFetch
from ..support.http_fixtures import sse_events
from .test_http import auth, body, running

BIG = 'é\u202e"\\x' * (_bodies.CONTENT_CHUNK // 2) + "end"  # past two chunks, with escapes
CONFIG = Config(ttl=100, targets_per_job=4, jobs_per_caller=1, jobs_total=2)


def _big_fetch(fetch: ScriptedFetch, content: str, meta: dict[str, Any]) -> None:
    fetch.custom["https://example.test/big"] = lambda: Result(content, meta)


def _big_fetch_url(fetch: ScriptedFetch, url: str) -> None:
    fetch.custom[url] = lambda: Result("y" * (INLINE_RESULT + 1))


async def test_a_big_result_is_sent_in_pieces_and_reads_back_whole(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    _big_fetch(fetch, BIG, {"kind": "big", "n": [1, 2]})
    async with running(tmp_path, fetch, clock, config=CONFIG) as svc:
        r = await svc.client.post("/v1/batches", json=body("big", "small"), headers=auth())
        job_id = r.json()["id"]
        await svc.wait_done(job_id)
        async with svc.client.stream("GET", f"/v1/batches/{job_id}/targets/0", headers=auth()) as r:
            assert r.status_code == 200
            assert r.headers["content-type"] == "application/json"
            assert "content-length" not in r.headers  # streamed, not built whole first
            pieces = [piece async for piece in r.aiter_raw()]
        assert len(pieces) > 1
        data = json.loads(b"".join(pieces))
        assert data["result"] == {"content": BIG, "meta": {"kind": "big", "n": [1, 2]}}
        assert data["idx"] == 0 and data["status"] == "done"


async def test_the_event_stream_links_a_big_result_and_inlines_small_ones(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    content = "y" * (INLINE_RESULT + 1)
    _big_fetch(fetch, content, {})
    async with running(tmp_path, fetch, clock, config=CONFIG) as svc:
        r = await svc.client.post("/v1/batches", json=body("big", "small"), headers=auth())
        job_id = r.json()["id"]
        async with svc.client.stream("GET", f"/v1/batches/{job_id}/events", headers=auth()) as r:
            events = [e async for e in sse_events(r)]
        big, small = (e["data"] for e in events if e["event"] == "target")
        url = f"/v1/batches/{job_id}/targets/0"
        assert big["result"] is None and big["result_url"] == url
        assert big["result_size"] == len(Result(content).to_json_text())
        assert small["result"]["content"] == "content of https://example.test/small"
        read = await svc.client.get(url, headers=auth())
        assert read.json()["result"]["content"] == content


async def test_a_result_past_max_result_size_is_a_failed_target_in_the_api(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    _big_fetch(fetch, "z" * 5000, {})
    config = Config(ttl=100, targets_per_job=4, max_result_size=4096)
    async with running(tmp_path, fetch, clock, config=config) as svc:
        r = await svc.client.post("/v1/batches", json=body("big"), headers=auth())
        job = await svc.wait_done(r.json()["id"])
        assert job["status"] == "failed"
        target = (await svc.client.get(f"/v1/batches/{job['id']}/targets/0", headers=auth())).json()
        assert target["result"] is None and target["error"].startswith("ResultTooLarge: ")


texts = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)
metas = st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), texts, st.none()))


@given(content=texts, meta=metas, chunk=st.integers(min_value=1, max_value=9))
def test_pieces_join_to_exactly_the_whole_json(
    content: str, meta: dict[str, Any], chunk: int
) -> None:
    result = Result(content, meta)
    target = TargetStatus(
        7, "https://x.test/é", TargetState.DONE, result, None, "h", finished_at=2.5, attempts=3
    )
    pieces = list(_bodies.target_json_chunks(target, chunk))
    whole = json.dumps(target.to_json(), ensure_ascii=False, separators=(",", ":"))
    assert b"".join(pieces).decode() == whole
    if len(content) > chunk:
        assert len(pieces) >= 3  # the head, the content in slices, the tail


async def test_the_event_stream_links_big_results_without_reading_them(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its watcher read every result to send most of them as links: 19 KB of events loaded
    # 640 MB of results.
    size = INLINE_RESULT + 1000  # each big one linked, not sent
    names = [f"big{i}" if i % 2 == 0 else f"small{i}" for i in range(8)]
    for i, name in enumerate(names):
        text = chr(97 + i) * (size if i % 2 == 0 else 10)
        fetch.custom[f"https://example.test/{name}"] = lambda text=text: Result(text)
    loaded: list[int] = []  # the size of every result the store read for the stream
    real = SQLiteJobStore.get_outcomes

    async def recorded(self: SQLiteJobStore, *args: Any, **kwargs: Any) -> Any:
        found = await real(self, *args, **kwargs)
        if found is not None:
            loaded.extend(len(t.result.to_json_text()) for t in found[1] if t.result)
        return found

    monkeypatch.setattr(SQLiteJobStore, "get_outcomes", recorded)
    config = Config(ttl=100, targets_per_job=8, jobs_per_caller=1, jobs_total=2)
    async with running(tmp_path, fetch, clock, config=config) as svc:
        r = await svc.client.post("/v1/batches", json=body(*names), headers=auth())
        job_id = r.json()["id"]
        await svc.wait_done(job_id)
        loaded.clear()  # the stream below reads a finished job: every outcome is stored
        async with svc.client.stream("GET", f"/v1/batches/{job_id}/events", headers=auth()) as r:
            events = [e async for e in sse_events(r)]
        view = (await svc.client.get(f"/v1/batches/{job_id}", headers=auth())).json()
    targets = [e["data"] for e in events if e["event"] == "target"]
    assert [t["idx"] for t in targets] == list(range(8))
    assert events[-1]["event"] == "job" and events[-1]["data"]["status"] == "done"
    big, small = targets[0::2], targets[1::2]
    assert all(t["result"] is None for t in big)
    # A link tells the size the job view tells, and where to read the result.
    sizes = {t["idx"]: t["result_size"] for t in view["targets"]}
    assert all(t["result_size"] == sizes[t["idx"]] > INLINE_RESULT for t in big)
    assert all(t["result_url"] == f"/v1/batches/{job_id}/targets/{t['idx']}" for t in big)
    assert all(t["result"]["content"] == chr(97 + t["idx"]) * 10 for t in small)
    # Only the small results were read from the store; no big one was, even to be sized.
    assert len(loaded) == 4 and max(loaded) <= INLINE_RESULT, loaded


async def test_a_resubmit_a_retry_and_a_cancel_answer_without_reading_a_result(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Their answers count the job's targets by status: reading the whole job for that loaded
    # every result of a reused job (64 of 10 MB: 640 MB for a 200 with a few counts).
    for name in ("big0", "big1", "big2"):
        _big_fetch_url(fetch, f"https://example.test/{name}")
    loaded: list[int] = []
    for name in ("get_status", "get_overview", "get_target", "get_outcomes", "get_targets_after"):
        real = getattr(SQLiteJobStore, name)

        async def recorded(self: SQLiteJobStore, *args: Any, _real: Any = real, **kw: Any) -> Any:
            found = await _real(self, *args, **kw)
            if found is not None:
                targets = found[1] if isinstance(found[1], list) else [found[1]]
                loaded.extend(t.idx for t in targets if t.result is not None)
            return found

        monkeypatch.setattr(SQLiteJobStore, name, recorded)
    calls = 0

    def flaky() -> Result:  # fails once, then has a big result: its retry stores one
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Boom("not yet")
        return Result("z" * (INLINE_RESULT + 1))

    fetch.custom["https://example.test/flaky"] = flaky
    config = Config(ttl=100, targets_per_job=4, jobs_per_caller=3, jobs_total=3)
    async with running(tmp_path, fetch, clock, config=config) as svc:
        first = await svc.client.post("/v1/batches", json=body("big0", "flaky"), headers=auth())
        job_id = first.json()["id"]
        await svc.wait_done(job_id)  # its event stream reads the results, as it should
        loaded.clear()
        await svc.client.get(f"/v1/batches/{job_id}/targets/0", headers=auth())
        assert loaded == [0]  # a read of the result itself does load it
        retried = await svc.client.post(f"/v1/batches/{job_id}/retry", json={}, headers=auth())
        assert retried.status_code == 201, retried.text
        assert (await svc.wait_done(retried.json()["id"]))["status"] == "done"
        loaded.clear()
        again = await svc.client.post("/v1/batches", json=body("big0", "flaky"), headers=auth())
        assert (again.status_code, again.json()["counts"]["done"]) == (200, 1)
        retried = await svc.client.post(f"/v1/batches/{job_id}/retry", json={}, headers=auth())
        assert (retried.status_code, retried.json()["counts"]["done"]) == (200, 1)
        assert loaded == []
        started, release = fetch.gate("https://example.test/big2")
        live = (await svc.submit("big1", "big2"))["id"]
        await started.wait()  # big1 is stored
        cancelled = await svc.client.post(f"/v1/batches/{live}/cancel", headers=auth())
        assert cancelled.json()["status"] == "cancelled"
        release.set()
        assert loaded == []
