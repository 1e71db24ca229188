"""The service's documented rules at their edges: a body of exactly ``max_body`` bytes, a token
of exactly the shortest length, label values holding ``:``, ``created_after`` with an offset or
none. Each test fails when its rule breaks by one."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from trio_batch import Config
from trio_batch._targets import MAX_URL_LENGTH
from trio_batch.http import MIN_TOKEN_LENGTH, TokenAuth

from ..support.fakes import FakeClock, ScriptedFetch
from .test_batch_data import _ids, _submit
from .test_http import auth, body, problem, running

JSON = {"Content-Type": "application/json"}


def _padded(size: int) -> bytes:
    """A valid submit body of exactly ``size`` bytes (JSON allows trailing blanks)."""
    raw = json.dumps(body("a")).encode()
    assert len(raw) <= size
    return raw + b" " * (size - len(raw))


async def _chunks(size: int) -> AsyncIterator[bytes]:
    """:func:`_padded` sent without a Content-Length (chunked): counted as it arrives."""
    data = _padded(size)
    for i in range(0, len(data), 100):
        yield data[i : i + 100]


async def test_a_body_of_exactly_max_body_bytes_is_taken_and_one_more_is_413(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock, max_body=1000) as svc:
        r = await svc.client.post("/v1/batches", content=_padded(1000), headers=auth() | JSON)
        assert r.status_code == 201, r.text
        r = await svc.client.post("/v1/batches", content=_padded(1001), headers=auth() | JSON)
        problem(r, 413, "body-too-large")

        r = await svc.client.post("/v1/batches", content=_chunks(1000), headers=auth() | JSON)
        assert r.status_code == 200, r.text  # the same batch again: reused
        r = await svc.client.post("/v1/batches", content=_chunks(1001), headers=auth() | JSON)
        problem(r, 413, "body-too-large")


async def test_a_token_of_exactly_the_shortest_length_is_taken(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    tokens = tmp_path / "tokens"
    shortest = "t" * MIN_TOKEN_LENGTH
    tokens.write_text(f"{shortest} carol\n")
    async with running(tmp_path, fetch, clock, auth=TokenAuth.from_file(tokens)) as svc:
        r = await svc.client.get("/v1/batches", headers=auth(shortest))
        assert r.status_code == 200, r.text
    tokens.write_text(f"{shortest[1:]} carol\n")
    with pytest.raises(ValueError, match=f"shorter than {MIN_TOKEN_LENGTH} characters"):
        TokenAuth.from_file(tokens)


async def test_a_label_value_holding_colons_is_matched_whole(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as s:
        job = await _submit(s, ("a",), metadata={"source": "https://x.test:8443/feed"})
        await s.wait_done(job["id"])
        assert await _ids(s, "label=source:https://x.test:8443/feed") == [job["id"]]
        assert await _ids(s, "label=source:https://x.test") == []
        r = await s.client.post(
            "/v1/batches/cancel",
            json={"label": "source:https://x.test:8443/feed", "dry_run": True},
            headers=auth(),
        )
        assert r.json()["count"] == 0 and r.status_code == 200  # ended: nothing to cancel


@pytest.fixture
def far_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is 9 hours from UTC (a zone-less time must ignore it)."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


async def test_created_after_reads_an_offset_and_takes_a_time_without_one_as_utc(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, far_zone: None
) -> None:
    async with running(tmp_path, fetch, clock, config=Config(ttl=100, jobs_per_caller=2)) as s:
        first = await _submit(s, ("1/hang",))
        clock.advance(60)
        second = await _submit(s, ("2/hang",))
        at = datetime.datetime.fromtimestamp(first["created_at"] + 30, tz=datetime.UTC)
        spellings = [
            at.isoformat(),
            at.replace(tzinfo=None).isoformat(),  # no offset: UTC
            at.astimezone(datetime.timezone(datetime.timedelta(hours=5, minutes=30))).isoformat(),
            at.astimezone(datetime.timezone(datetime.timedelta(hours=-7))).isoformat(),
        ]
        for when in spellings:
            query = "created_after=" + when.replace("+", "%2B")
            assert await _ids(s, query) == [second["id"]], when
            r = await s.client.post(
                "/v1/batches/cancel", json={"created_after": when, "dry_run": True}, headers=auth()
            )
            assert r.json()["ids"] == [second["id"]], when


async def test_created_after_below_zero_is_422_as_the_schema_says(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as s:
        for bad in (-1, -0.5):
            r = await s.client.post(
                "/v1/batches/cancel", json={"created_after": bad, "dry_run": True}, headers=auth()
            )
            assert "created_after" in problem(r, 422, "invalid-request")["detail"]
        r = await s.client.post(
            "/v1/batches/cancel", json={"created_after": 0, "dry_run": True}, headers=auth()
        )
        assert r.status_code == 200, r.text


async def test_metadata_and_custom_ids_at_their_longest_are_taken_one_more_is_422(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    longest = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    target = {"url": "https://example.test/a", "custom_id": "c" * 64}
    async with running(tmp_path, fetch, clock) as s:
        r = await s.client.post(
            "/v1/batches", json={"targets": [target], "metadata": longest}, headers=auth()
        )
        assert r.status_code == 201, r.text
        assert r.json()["metadata"] == longest
        await s.wait_done(r.json()["id"])
        key = next(iter(longest))
        for metadata, custom_id in [
            (longest | {"x": "v"}, "c" * 64),  # 17 keys
            ({key + "k": "v"}, "c" * 64),  # a key of 65
            ({key: "v" * 513}, "c" * 64),  # a value of 513
            (longest, "c" * 65),  # a custom id of 65
        ]:
            r = await s.client.post(
                "/v1/batches",
                json={"targets": [target | {"custom_id": custom_id}], "metadata": metadata},
                headers=auth(),
            )
            assert r.status_code == 422, (r.text, len(metadata))


async def test_a_page_of_100_jobs_is_the_most_a_list_gives(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock) as s:
        for limit, status in [(1, 200), (100, 200), (0, 422), (101, 422)]:
            r = await s.client.get(f"/v1/batches?limit={limit}", headers=auth())
            assert r.status_code == status, (limit, r.text)


async def test_a_url_of_8192_characters_is_taken_and_one_more_is_422(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    base = "https://example.test/?q="
    async with running(tmp_path, fetch, clock) as s:
        for size, status in [(MAX_URL_LENGTH + 1, 422), (MAX_URL_LENGTH, 201)]:
            url = base + "u" * (size - len(base))
            r = await s.client.post("/v1/batches", json={"targets": [{"url": url}]}, headers=auth())
            assert r.status_code == status, r.text[:200]
