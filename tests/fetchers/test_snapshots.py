"""Snapshots and replay: a job keeps its raw responses, another replays them with the fake site
stopped, re-processed with its own options; misses, other callers and the disk bound."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from trio_batch import Config, JobStore, Options, Runner, Target, open_runner, open_store
from trio_batch.fetchers import HttpFetcher, SnapshotStore
from trio_batch.fetchers._recording import Recording, ReplayRefused, check_replays

from ..support.fakes import FakeClock
from ..support.local_server import HTML, TEXT, VERSIONED, LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=4, jobs_total=8)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JobStore]:
    s = open_store(str(tmp_path / "jobs.db"))
    try:
        yield s
    finally:
        await s.aclose()


@pytest.fixture
def snapshots(tmp_path: Path) -> SnapshotStore:
    return SnapshotStore(tmp_path / "jobs.db.snapshots")


async def run(runner: Runner, targets: list[Target], caller: str = "alice") -> str:
    job_id, reused = await runner.submit(caller, "user", targets)
    assert not reused
    job = await runner.wait(job_id)
    assert job is not None and job.is_terminal
    return job_id


def recorded(urls: list[str]) -> list[Target]:
    return Recording(snapshot=True).apply([Target(u) for u in urls])


def replayed(job_id: str, targets: list[Target], **more: object) -> list[Target]:
    return Recording(replay=job_id, **more).apply(targets)  # type: ignore[arg-type]


async def test_a_snapshot_keeps_each_raw_response_once_by_digest(
    server: LocalServer, store: JobStore, snapshots: SnapshotStore, clock: FakeClock
) -> None:
    urls = [server.url("/page.html"), server.url("/versioned")]
    async with open_runner(store, HttpFetcher(snapshots=snapshots), CONFIG, now=clock) as runner:
        first = await run(runner, recorded(urls))
        second = await run(runner, recorded(urls), caller="bob")
        status = await runner.status(first)
    assert status is not None
    entries = {e.url: e for e in snapshots.entries(first)}
    assert set(entries) == set(urls)
    page = entries[urls[0]]
    assert page.status == 200 and page.http_version == "HTTP/1.1" and page.reason == "OK"
    assert ("Content-Type", "text/html; charset=utf-8") in page.headers
    assert snapshots.blob_path(page.sha256).read_bytes() == HTML.encode()
    assert page.sha256 == status[1][0].result.meta["sha256"]  # type: ignore[union-attr]
    assert dict(entries[urls[1]].headers)["ETag"] == '"v1"'
    # Two jobs, the same two bodies: two blobs on disk.
    assert {e.sha256 for e in snapshots.entries(second)} == {e.sha256 for e in entries.values()}
    assert len(list((snapshots.root / "blobs").glob("*/*"))) == 2
    assert (await snapshots.owner(first)).caller == "alice"  # type: ignore[union-attr]


async def test_replay_reprocesses_the_kept_bytes_with_the_fake_site_stopped(
    server: LocalServer, store: JobStore, snapshots: SnapshotStore, clock: FakeClock
) -> None:
    page, text = server.url("/page.html"), server.url("/text.txt")
    fetcher = HttpFetcher(snapshots=snapshots)
    async with open_runner(store, fetcher, CONFIG, now=clock) as runner:
        recorded_id = await run(runner, recorded([page, text]))
        server.shutdown()
        server.server_close()  # nothing listens: a fetch would fail with a NetworkError
        again = [
            Target(page, Options(mode="text", grep="pears")),
            Target(text, Options(grep="match")),
        ]
        replay_id = await run(runner, replayed(recorded_id, again))
        status = await runner.status(replay_id)
        original = await runner.status(recorded_id)
    assert status is not None and original is not None
    job, targets = status
    assert (job.status, job.targets_failed) == ("done", 0), [t.error for t in targets]
    first, second = (t.result for t in targets)
    assert first is not None and second is not None
    assert first.content == "The second paragraph mentions pears."
    assert second.content == "\n".join(line for line in TEXT.splitlines() if "match" in line)
    assert first.meta["replayed"] is True and first.meta["replay"] == recorded_id
    was = original[1][0].result
    assert was is not None
    # The same bytes, and when they were fetched then.
    for key in ("sha256", "bytes", "fetched_at", "url", "status_code", "date"):
        assert first.meta[key] == was.meta[key], key


async def test_a_target_missing_from_the_snapshot_fails_naming_it_unless_fetched(
    server: LocalServer, store: JobStore, snapshots: SnapshotStore, clock: FakeClock
) -> None:
    page, other = server.url("/page.html"), server.url("/data.json")
    async with open_runner(store, HttpFetcher(snapshots=snapshots), CONFIG, now=clock) as runner:
        recorded_id = await run(runner, recorded([page]))
        before = server.count("/data.json")
        strict = await run(runner, replayed(recorded_id, [Target(page), Target(other)]))
        assert server.count("/data.json") == before  # never fetched silently
        lenient = await run(
            runner, replayed(recorded_id, [Target(page), Target(other)], on_miss="fetch")
        )
        strict_status = await runner.status(strict)
        lenient_status = await runner.status(lenient)
    assert strict_status is not None and lenient_status is not None
    missed = strict_status[1][1]
    assert missed.error == f"SnapshotMiss: {other} is not in the snapshot of job {recorded_id}"
    assert missed.hint and "on_miss" in missed.hint
    fetched = lenient_status[1][1].result
    assert fetched is not None
    assert fetched.meta["replayed"] is False and fetched.meta["replay_miss"] == recorded_id
    assert server.count("/data.json") == before + 1


async def test_another_callers_snapshot_reads_as_unknown_until_pinned_and_shared(
    server: LocalServer, store: JobStore, snapshots: SnapshotStore, clock: FakeClock
) -> None:
    page = server.url("/page.html")
    async with open_runner(store, HttpFetcher(snapshots=snapshots), CONFIG, now=clock) as runner:
        alices = await run(runner, recorded([page]))
        unknown_id = "A" * 22

        async def refusal(caller: str, job_id: str) -> str:
            with pytest.raises(ReplayRefused) as info:
                await check_replays(
                    snapshots, store, caller, replayed(job_id, [Target(page)]), now=clock()
                )
            return str(info.value)

        bobs_view = await refusal("bob", alices)
        assert bobs_view == f"no job {alices} to replay (unknown id, or its lease has lapsed)"
        assert await refusal("bob", unknown_id) == bobs_view.replace(alices, unknown_id)
        plain = await run(runner, [Target(server.url("/text.txt"))])
        assert "has no snapshot" in await refusal("alice", plain)
        # A caller who sets the option on each target, past the submit check, still gets
        # nothing of another's snapshot.
        sneaked = await run(runner, replayed(alices, [Target(page)]), caller="bob")
        sneaked_status = await runner.status(sneaked)
        assert sneaked_status is not None
        assert (sneaked_status[1][0].error or "").startswith("SnapshotMiss:")
        # Pinned but not shared: still Alice's alone; pinned and shared: anyone's.
        assert snapshots.set_pin(alices, pinned=True, shared=False)
        assert await refusal("bob", alices) == bobs_view
        assert snapshots.set_pin(alices, pinned=True, shared=True)
        await check_replays(snapshots, store, "bob", replayed(alices, [Target(page)]), now=clock())
        shared = await run(runner, replayed(alices, [Target(page)]), caller="carol")
        shared_status = await runner.status(shared)
    assert shared_status is not None and shared_status[1][0].result is not None
    assert shared_status[1][0].result.meta["replayed"] is True


async def test_snapshots_past_their_bound_fail_the_target_and_keep_nothing_of_it(
    server: LocalServer, store: JobStore, tmp_path: Path, clock: FakeClock
) -> None:
    small = SnapshotStore(tmp_path / "small", max_bytes=len(HTML.encode()) + 10)
    page, big = server.url("/page.html"), server.url("/big?n=100")
    async with open_runner(store, HttpFetcher(snapshots=small), CONFIG, now=clock) as runner:
        job_id = await run(runner, recorded([page, big]))
        status = await runner.status(job_id)
    assert status is not None
    kept, refused = status[1]
    assert kept.error is None
    assert (refused.error or "").startswith("SnapshotFull: keeping 100 more bytes")
    assert refused.hint and "--snapshot-max-bytes" in refused.hint
    assert [e.url for e in small.entries(job_id)] == [page]
    assert small.used_bytes() == len(HTML.encode())


@pytest.mark.parametrize(
    "bound", [float("nan"), float("inf"), 1.5, True], ids=["nan", "inf", "1.5", "True"]
)
def test_a_snapshot_bound_that_is_no_whole_number_is_refused(tmp_path: Path, bound: object) -> None:
    # NaN passed "max_bytes < 0" and bounded nothing: no comparison with NaN is true, so
    # every body was kept however full the directory.
    with pytest.raises((TypeError, ValueError), match="max_bytes"):
        SnapshotStore(tmp_path / "snaps", max_bytes=bound)  # type: ignore[arg-type]


async def test_a_lapsed_jobs_snapshot_is_collected_unless_pinned(
    server: LocalServer, store: JobStore, snapshots: SnapshotStore, clock: FakeClock
) -> None:
    async with open_runner(store, HttpFetcher(snapshots=snapshots), CONFIG, now=clock) as runner:
        kept = await run(runner, recorded([server.url("/page.html")]))
        dropped = await run(runner, recorded([server.url("/text.txt")]))
    snapshots.set_pin(kept, pinned=True)

    async def alive(job_id: str) -> bool:
        return await store.get_job(job_id, now=clock()) is not None

    assert await snapshots.collect(alive, grace=0) == (0, 0)  # both leases last
    stale = snapshots.root / "jobs" / ".import-killed"  # what a killed import leaves
    (stale / "targets").mkdir(parents=True)
    clock.advance(CONFIG.ttl + 1)
    assert await snapshots.collect(alive, grace=0) == (1, 1)
    assert snapshots.job_ids() == [kept] and dropped not in snapshots.job_ids()
    assert not stale.exists()
    blobs = [p.read_bytes() for p in (snapshots.root / "blobs").glob("*/*")]
    assert blobs == [HTML.encode()]


async def test_revalidation_reuses_the_kept_bytes_on_304(
    server: LocalServer, store: JobStore, snapshots: SnapshotStore, clock: FakeClock
) -> None:
    url = server.url("/versioned")
    fetcher = HttpFetcher(snapshots=snapshots, now=clock)
    async with open_runner(store, fetcher, CONFIG, now=clock) as runner:
        recorded_id = await run(runner, recorded([url]))
        clock.advance(10)
        same = await run(runner, replayed(recorded_id, [Target(url)], revalidate=True))
        server.version = 2
        changed = await run(
            runner, replayed(recorded_id, [Target(url, Options(grep="page"))], revalidate=True)
        )
        same_status, changed_status = await runner.status(same), await runner.status(changed)
    assert same_status is not None and changed_status is not None
    not_modified, modified = same_status[1][0].result, changed_status[1][0].result
    assert not_modified is not None and modified is not None
    assert not_modified.content == f"{VERSIONED} 1"
    assert not_modified.meta["revalidated"] == "not_modified"
    assert not_modified.meta["replayed"] is True
    assert not_modified.meta["fetched_at"] == clock.now  # checked now, bytes of then
    assert modified.content == f"{VERSIONED} 2"
    assert modified.meta["revalidated"] == "modified" and modified.meta["replayed"] is False
    assert modified.meta["sha256"] == hashlib.sha256(f"{VERSIONED} 2".encode()).hexdigest()
    assert fetcher.snapshot_counts == {"recorded": 1, "not_modified": 1, "modified": 1}


def test_damaged_files_are_typed_errors_not_wrong_bytes(tmp_path: Path) -> None:
    snaps = SnapshotStore(tmp_path)
    from trio_batch.fetchers import SnapshotError
    from trio_batch.fetchers._body import Body
    from trio_batch.fetchers._snapshot_entry import Entry

    job_id = "B" * 22
    body = Body("http://x/", 200, "text/plain", None, b"hello", 0)
    entry = Entry.of("http://x/", body, 1.0)
    snaps.record_sync(job_id, "alice", entry, body.data)
    assert snaps.lookup_sync(job_id, "http://x/", 100) == (entry, b"hello")
    snaps.blob_path(entry.sha256).write_bytes(b"HELLO")
    with pytest.raises(SnapshotError, match="does not match its sha256"):
        snaps.lookup_sync(job_id, "http://x/", 100)
    (entry_file,) = (tmp_path / "jobs" / job_id / "targets").iterdir()
    entry_file.write_text(json.dumps({"url": "http://x/"}))
    with pytest.raises(SnapshotError, match="its entry is not one"):
        snaps.lookup_sync(job_id, "http://x/", 100)


async def test_an_error_answer_is_kept_and_replays_as_the_same_error(
    server: LocalServer, store: JobStore, snapshots: SnapshotStore, clock: FakeClock
) -> None:
    missing = server.url("/missing")
    async with open_runner(store, HttpFetcher(snapshots=snapshots), CONFIG, now=clock) as runner:
        recorded_id = await run(runner, recorded([missing]))
        server.shutdown()
        server.server_close()
        replay_id = await run(runner, replayed(recorded_id, [Target(missing)]))
        original, replay = await runner.status(recorded_id), await runner.status(replay_id)
    assert original is not None and replay is not None
    was, now = original[1][0], replay[1][0]
    assert was.error == f"HTTPStatusError: HTTP 404 Not Found from {missing}"
    assert (now.error, now.hint) == (was.error, was.hint)
    (entry,) = snapshots.entries(recorded_id)
    assert entry.status == 404
    assert snapshots.blob_path(entry.sha256).read_bytes() == b"not here"


def test_where_snapshots_live_beside_sqlite_or_in_a_shared_directory() -> None:
    from trio_batch.fetchers import snapshot_root

    assert snapshot_root("/data/jobs.db") == Path("/data/jobs.db.snapshots")
    assert snapshot_root("sqlite:////data/jobs.db") == Path("/data/jobs.db.snapshots")
    assert snapshot_root("sqlite:///jobs.db?busy_timeout=2") == Path("jobs.db.snapshots")
    assert snapshot_root(":memory:") is None
    assert snapshot_root("postgresql://u@db.example/jobs") is None
    assert snapshot_root("postgresql://u@db.example/jobs", "/shared") == Path("/shared")


@pytest.mark.parametrize(
    ("options", "option", "words"),
    [
        (Options(snapshot=True), "snapshot", "needs a snapshot directory"),
        (Options(replay="R" * 22), "replay", "needs a snapshot directory"),
        (Options(on_miss="fetch"), "on_miss", "needs 'replay'"),
        (Options(revalidate=True), "revalidate", "needs 'replay'"),
        (Options(replay="not an id"), "replay", "is not a job id"),
        (Options(replay="R" * 22, on_miss="maybe"), "on_miss", "unknown on_miss"),
    ],
)
def test_bad_snapshot_options_are_refused_at_submit(
    options: Options, option: str, words: str, tmp_path: Path
) -> None:
    from trio_batch.fetchers import OptionError

    with_dir = HttpFetcher(snapshots=SnapshotStore(tmp_path))
    fetcher = HttpFetcher() if "directory" in words else with_dir
    with pytest.raises(OptionError, match=words) as info:
        fetcher.check_target(Target("https://example.test/", options))
    assert info.value.option == option and info.value.hint


async def test_a_pin_that_lands_while_gc_asks_whether_the_job_lives_keeps_the_snapshot(
    tmp_path: Path,
) -> None:
    # gc read "not pinned", then awaited the store: a pin answered 200 in between, and the
    # snapshot it promised to keep was deleted.
    from trio_batch.fetchers._body import Body
    from trio_batch.fetchers._snapshot_entry import Entry

    snaps = SnapshotStore(tmp_path)
    job_id = "C" * 22
    body = Body("http://x/", 200, "text/plain", None, b"hello", 0)
    entry = Entry.of("http://x/", body, 1.0)
    snaps.record_sync(job_id, "alice", entry, body.data)

    async def pinned_meanwhile(asked: str) -> bool:
        assert snaps.set_pin(asked, pinned=True)
        return False  # the job's lease ran out as it was pinned

    assert await snaps.collect(pinned_meanwhile, grace=0) == (0, 0)
    owner = snaps.owner_sync(job_id)
    assert owner is not None and owner.pinned
    assert snaps.lookup_sync(job_id, "http://x/", 100) == (entry, b"hello")
