"""The HTTP status of a response in an imported WARC: three ASCII digits, as HTTP/1.1 has
them, or the import is refused naming it (nothing is kept), never read as another number."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_batch.fetchers import SnapshotStore
from trio_batch.fetchers._warc import WarcError, import_warc

BODY = b"<p>crawled elsewhere</p>"


def warc_with_status(path: Path, status: bytes) -> Path:
    """A plain WARC of one response whose status line is ``HTTP/1.1 {status}``, as bytes a
    crawler may have written (warcio writes only ASCII)."""
    http = (
        b"HTTP/1.1 " + status + b"\r\nContent-Type: text/html\r\n"
        b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
    )
    head = (
        "WARC/1.1\r\nWARC-Type: response\r\nWARC-Target-URI: https://example.test/page\r\n"
        "WARC-Date: 2024-05-01T12:00:00Z\r\n"
        "WARC-Record-ID: <urn:uuid:6d058047-ede2-4a13-be79-90c17c631dd4>\r\n"
        "Content-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(http)}\r\n\r\n"
    )
    path.write_bytes(head.encode() + http + b"\r\n\r\n")
    return path


@pytest.mark.parametrize(
    "status",
    ["-5 OK", "2_00 OK", "9" * 23 + " OK", "+200 OK", "42 Odd", "0200 OK"],
)
def test_a_status_that_is_not_three_digits_is_refused_at_import(
    tmp_path: Path, status: str
) -> None:
    # int() read "-5" (replayed as status -5, "done"), "2_00" (as 200), and 23 nines (kept,
    # then failed at each replay).
    path = warc_with_status(tmp_path / "crawl.warc", status.encode())
    snaps = SnapshotStore(tmp_path / "snaps")
    with pytest.raises(WarcError, match="not three digits from 100 to 999"):
        import_warc(snaps, path, "carol", max_bytes=1 << 20)
    assert snaps.job_ids() == []


@pytest.mark.parametrize(("status", "code"), [("200 OK", 200), ("404 Not Found", 404)])
def test_a_three_digit_status_is_kept(tmp_path: Path, status: str, code: int) -> None:
    path = warc_with_status(tmp_path / "crawl.warc", status.encode())
    snaps = SnapshotStore(tmp_path / "snaps")
    job_id, count = import_warc(snaps, path, "carol", max_bytes=1 << 20)
    assert count == 1
    found = snaps.lookup_sync(job_id, "https://example.test/page", 1 << 20)
    assert found is not None and found[0].status == code and found[1] == BODY
