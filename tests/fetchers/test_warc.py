"""WARC out and in: warcio reads what a snapshot exports, digests match ``meta``; an imported
WARC replays on another store with the fake site stopped; a cut or malformed file keeps
nothing."""

from __future__ import annotations

import base64
import gzip
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from trio_batch import Config, JobStore, Options, Runner, Target, open_runner, open_store
from trio_batch.fetchers import HttpFetcher, SnapshotError, SnapshotStore
from trio_batch.fetchers._recording import Recording
from trio_batch.fetchers._warc import WarcError, import_warc, warc_records

from ..support.fakes import FakeClock
from ..support.local_server import HTML, LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=4, jobs_total=8)
MAX = 10 * 1024 * 1024


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JobStore]:
    s = open_store(str(tmp_path / "jobs.db"))
    try:
        yield s
    finally:
        await s.aclose()


async def run(runner: Runner, targets: list[Target], caller: str = "alice") -> str:
    job_id, _ = await runner.submit(caller, "user", targets)
    job = await runner.wait(job_id)
    assert job is not None and job.status == "done", job
    return job_id


@pytest.fixture
async def recorded(
    server: LocalServer, store: JobStore, tmp_path: Path, clock: FakeClock
) -> tuple[SnapshotStore, str, dict[str, dict[str, object]]]:
    """A job that kept /page.html and a redirect to /text.txt; its metas by target URL."""
    snaps = SnapshotStore(tmp_path / "jobs.db.snapshots")
    urls = [server.url("/page.html"), server.url("/redirect?to=/text.txt")]
    targets = Recording(snapshot=True).apply([Target(u) for u in urls])
    async with open_runner(store, HttpFetcher(snapshots=snaps), CONFIG, now=clock) as runner:
        job_id = await run(runner, targets)
        status = await runner.status(job_id)
    assert status is not None
    metas = {t.url: dict(t.result.meta) for t in status[1] if t.result is not None}
    return snaps, job_id, metas


def _write(snaps: SnapshotStore, job_id: str, path: Path) -> bytes:
    data = b"".join(warc_records(snaps, job_id))
    path.write_bytes(data)
    return data


async def test_export_is_warc_1_1_pairs_whose_payload_digests_match_meta(
    recorded: tuple[SnapshotStore, str, dict[str, dict[str, object]]], tmp_path: Path
) -> None:
    snaps, job_id, metas = recorded
    path = tmp_path / "job.warc.gz"
    _write(snaps, job_id, path)
    seen: list[tuple[str, str]] = []
    with path.open("rb") as f:
        for record in ArchiveIterator(f, check_digests=True):  # raises on a digest mismatch
            headers = record.rec_headers
            assert headers.protocol == "WARC/1.1"
            seen.append((record.rec_type, headers.get_header("WARC-Target-URI")))
            if record.rec_type != "response":
                continue
            target = headers.get_header("Trio-Batch-Target-URI") or headers["WARC-Target-URI"]
            meta = metas[target]
            label, _, b32 = headers.get_header("WARC-Payload-Digest").partition(":")
            assert label == "sha256"
            assert base64.b32decode(b32).hex() == meta["sha256"]
            payload = record.content_stream().read()
            assert len(payload) == meta["bytes"]
            assert record.http_headers.get_statuscode() == "200"
    assert [kind for kind, _ in seen] == ["response", "request"] * 2  # warcio's order
    finals = {uri for _, uri in seen}
    assert finals == {m["url"] for m in metas.values()}  # the final URLs, after redirects


async def test_an_imported_warc_replays_elsewhere_with_the_site_stopped(
    recorded: tuple[SnapshotStore, str, dict[str, dict[str, object]]],
    server: LocalServer,
    tmp_path: Path,
    clock: FakeClock,
) -> None:
    snaps, job_id, metas = recorded
    path = tmp_path / "job.warc.gz"
    _write(snaps, job_id, path)
    server.shutdown()
    server.server_close()
    elsewhere = SnapshotStore(tmp_path / "other" / "jobs.db.snapshots")
    imported, count = import_warc(elsewhere, path, "carol", max_bytes=MAX)
    assert count == 2
    page, redirect = server.url("/page.html"), server.url("/redirect?to=/text.txt")
    targets = [Target(page, Options(mode="text", grep="apples")), Target(redirect)]
    async with (
        open_store(str(tmp_path / "other" / "jobs.db")) as other,
        open_runner(other, HttpFetcher(snapshots=elsewhere), CONFIG, now=clock) as runner,
    ):
        replay = await run(runner, Recording(replay=imported).apply(targets), caller="carol")
        status = await runner.status(replay)
    assert status is not None
    first, second = (t.result for t in status[1])
    assert first is not None and second is not None
    assert first.content == "The first paragraph mentions apples."
    for result, url in ((first, page), (second, redirect)):
        assert result.meta["replayed"] is True
        for key in ("sha256", "bytes", "url", "status_code", "content_type"):
            assert result.meta[key] == metas[url][key], (url, key)


def _member_starts(data: bytes) -> list[int]:
    """Where each gzip member of ``data`` starts."""
    starts, rest, offset = [], data, 0
    import zlib

    while rest:
        starts.append(offset)
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)
        d.decompress(rest)
        used = len(rest) - len(d.unused_data)
        offset += used
        rest = d.unused_data
    return starts


async def test_a_warc_gz_cut_inside_a_record_is_refused_and_nothing_kept(
    recorded: tuple[SnapshotStore, str, dict[str, dict[str, object]]], tmp_path: Path
) -> None:
    snaps, job_id, _ = recorded
    data = b"".join(warc_records(snaps, job_id))
    starts = _member_starts(data)
    assert len(starts) == 4  # response, request, response, request
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(data[: starts[2] + 40])  # inside the second response's member
    target = SnapshotStore(tmp_path / "target")
    with pytest.raises(WarcError, match=rf"gzip member 3 \(the record at byte {starts[2]}\)"):
        import_warc(target, cut, "carol", max_bytes=MAX)
    assert not (target.root / "jobs").exists() or not any((target.root / "jobs").iterdir())
    assert not list((target.root / "blobs").glob("*/*"))  # the first body was deleted again


async def test_a_plain_warc_cut_inside_a_body_and_garbage_are_refused(
    recorded: tuple[SnapshotStore, str, dict[str, dict[str, object]]], tmp_path: Path
) -> None:
    snaps, job_id, _ = recorded
    plain = b"".join(gzip.decompress(member) for member in warc_records(snaps, job_id))
    body_at = plain.index(HTML.encode()[:40])
    cut = tmp_path / "cut.warc"
    cut.write_bytes(plain[: body_at + 20])
    target = SnapshotStore(tmp_path / "target")
    with pytest.raises(WarcError, match=r"record 1 \(http://127\.0\.0\.1:\d+/page\.html\) is cut"):
        import_warc(target, cut, "carol", max_bytes=MAX)
    junk = tmp_path / "junk.warc"
    junk.write_bytes(plain[:200] + b"\r\n\r\nnot a record at all\r\n" * 3)
    with pytest.raises(WarcError, match=r"junk\.warc: record 1 is malformed: "):
        import_warc(target, junk, "carol", max_bytes=MAX)
    small = tmp_path / "ok.warc"
    small.write_bytes(plain)
    with pytest.raises(WarcError, match="more than 10"):
        import_warc(target, small, "carol", max_bytes=10)
    assert target.job_ids() == []
    assert not list((target.root / "blobs").glob("*/*"))


async def test_export_makes_one_record_pair_at_a_time(
    recorded: tuple[SnapshotStore, str, dict[str, dict[str, object]]],
) -> None:
    snaps, job_id, _ = recorded
    records = warc_records(snaps, job_id)
    first = next(records)
    # The later body is read only when its record is made: gone now, it fails then.
    entries = sorted(snaps.entries(job_id), key=lambda e: (e.fetched_at, e.url))
    snaps.blob_path(entries[1].sha256).unlink()
    assert [r.rec_type for r in ArchiveIterator(io.BytesIO(first))] == ["response", "request"]
    gone = f"the snapshot of job {job_id} cannot give .*: its body is missing"
    with pytest.raises(SnapshotError, match=gone):
        next(records)


async def test_export_of_a_snapshot_missing_a_body_fails_before_any_record(
    recorded: tuple[SnapshotStore, str, dict[str, dict[str, object]]],
) -> None:
    snaps, job_id, _ = recorded
    entries = sorted(snaps.entries(job_id), key=lambda e: (e.fetched_at, e.url))
    snaps.blob_path(entries[1].sha256).unlink()
    gone = r"its body is missing or unreadable \(No such file or directory\)"
    with pytest.raises(SnapshotError, match=gone):
        warc_records(snaps, job_id)


def test_an_export_holds_one_record_in_memory_not_the_snapshot(tmp_path: Path) -> None:
    """Eight bodies of 1 MiB that do not compress: the export's peak of traced allocations
    stays near one record's size, far below the eight it writes."""
    import os
    import tracemalloc

    from trio_batch.fetchers._body import Body
    from trio_batch.fetchers._snapshot_entry import Entry

    snaps = SnapshotStore(tmp_path / "snaps")
    job_id = "M" * 22
    size = 1024 * 1024
    for i in range(8):
        url = f"http://example.test/{i}"
        body = Body(url, 200, "application/octet-stream", None, os.urandom(size), 0)
        snaps.record_sync(job_id, "alice", Entry.of(url, body, float(i)), body.data)
        del body
    out = tmp_path / "job.warc.gz"
    tracemalloc.start()
    try:
        with out.open("wb") as f:
            for record in warc_records(snaps, job_id):
                f.write(record)
                del record
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.stat().st_size > 8 * size
    assert peak < 3 * size, f"peak {peak} bytes"


def test_an_imported_response_is_kept_decoded_as_the_fetcher_would_have_it(
    tmp_path: Path,
) -> None:
    """A WARC from another crawler keeps the body as sent: chunked and gzip-encoded. The
    snapshot keeps what the fetcher would have read: the decoded bytes, without those headers."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    page = b"<p>crawled elsewhere</p>" * 50
    packed = gzip.compress(page)
    chunked = f"{len(packed):x}\r\n".encode() + packed + b"\r\n0\r\n\r\n"
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True, warc_version="1.1")
    headers = [
        ("Content-Type", "text/html; charset=utf-8"),
        ("Content-Encoding", "gzip"),
        ("Transfer-Encoding", "chunked"),
        ("ETag", '"e1"'),
    ]
    record = writer.create_warc_record(
        "https://example.test/page",
        "response",
        payload=io.BytesIO(chunked),
        length=len(chunked),
        http_headers=StatusAndHeaders("200 OK", headers, protocol="HTTP/1.1"),
        warc_headers_dict={"WARC-Date": "2024-05-01T12:00:00Z"},
    )
    writer.write_record(record)
    path = tmp_path / "crawl.warc.gz"
    path.write_bytes(buf.getvalue())
    snaps = SnapshotStore(tmp_path / "snaps")
    job_id, count = import_warc(snaps, path, "carol", max_bytes=MAX)
    assert count == 1
    found = snaps.lookup_sync(job_id, "https://example.test/page", MAX)
    assert found is not None
    entry, data = found
    assert data == page
    assert entry.content_type == "text/html" and entry.charset == "utf-8"
    assert dict(entry.headers) == {"Content-Type": "text/html; charset=utf-8", "ETag": '"e1"'}
    assert entry.fetched_at == 1714564800.0
    owner = snaps.owner_sync(job_id)
    assert owner is not None and owner.caller == "carol" and owner.pinned and not owner.shared
