"""WARC out and in: a job's snapshot as a WARC/1.1 file, and a WARC file as a snapshot.

Needs the ``warc`` extra (`warcio <https://github.com/webrecorder/warcio>`_, the Webrecorder
project's reader and writer, which pywb and the Internet Archive's tools use): the format's
details (record ids, dates, digests, per-record gzip members) are its, not ours.

Out (:func:`warc_records`): per kept response, a ``request`` record and a ``response``
record, each its own gzip member. The response's payload is the body as kept (after content
decoding), so ``Content-Encoding`` and ``Transfer-Encoding`` are left out of its headers and
``Content-Length`` is the kept size; its ``WARC-Payload-Digest`` is ``sha256:`` and the base32
of the digest whose hex is ``meta["sha256"]``. The target's own URL, when a redirect took the
fetch elsewhere, is kept in ``Trio-Batch-Target-URI`` (``WARC-Target-URI`` is the final URL).
Records are made one at a time, from the body file on disk: memory holds one compressed record.

In (:func:`import_warc`): every ``response`` record becomes an entry of a new snapshot (keyed
by ``Trio-Batch-Target-URI``, else ``WARC-Target-URI``), pinned, its bodies content-addressed
as any. The file is read whole before the snapshot appears: a truncated or malformed file
raises :class:`WarcError` naming the record, and nothing of it is kept. A ``.warc.gz`` cut at
a record boundary parses cleanly, so the gzip members are checked to end as well.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, Any
from urllib.parse import urlsplit

from .._model import new_job_id
from .._text import parse_count, safe_text
from ._answers import split_content_type
from ._provenance import FETCHER
from ._snapshot_entry import Entry, url_key
from ._snapshots import SnapshotError, SnapshotStore, damaged

__all__ = ["WarcError", "import_warc", "warc_records"]

#: Hop-by-hop and encoding headers that do not describe the payload as kept.
_DROPPED = frozenset({"content-encoding", "transfer-encoding", "content-length"})
#: The extension field naming the target's URL when it differs from ``WARC-Target-URI``.
TARGET_FIELD = "Trio-Batch-Target-URI"
_CHUNK = 64 * 1024


class WarcError(ValueError):
    """A WARC file that cannot be imported: truncated, malformed, or a record too large."""


def warc_records(snaps: SnapshotStore, job_id: str) -> Iterator[bytes]:
    """The WARC/1.1 file of ``job_id``'s snapshot, a gzip member (one record) at a time.

    Blocking (disk). Every body file is checked first: one gone raises
    :class:`SnapshotError` here, before a record is made, so nothing half-made goes out.
    Each body is then read from disk as its record is made (one gone meanwhile raises
    :class:`SnapshotError` from the iterator).
    """
    entries = sorted(snaps.entries(job_id), key=lambda e: (e.fetched_at, e.url))
    for entry in entries:
        try:
            os.stat(snaps.blob_path(entry.sha256))
        except OSError as exc:
            raise _lost_body(job_id, entry, exc) from None
    return _records(snaps, job_id, entries)


def _lost_body(job_id: str, entry: Entry, exc: OSError) -> SnapshotError:
    return damaged(job_id, entry.url, f"its body is missing or unreadable ({exc.strerror})")


def _records(snaps: SnapshotStore, job_id: str, entries: list[Entry]) -> Iterator[bytes]:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    for entry in entries:
        buf = io.BytesIO()
        writer = WARCWriter(buf, gzip=True, warc_version="1.1")
        date = _iso(entry.fetched_at)
        extra = {"WARC-Date": date}
        if entry.url != entry.final_url:
            extra[TARGET_FIELD] = entry.url
        parts = urlsplit(entry.final_url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = [(k, v) for k, v in entry.headers if k.lower() not in _DROPPED]
        headers.append(("Content-Length", str(entry.size)))
        status = f"{entry.status or 200} {entry.reason or 'OK'}".strip()
        digest = "sha256:" + base64.b32encode(bytes.fromhex(entry.sha256)).decode()
        try:
            body = open(snaps.blob_path(entry.sha256), "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise _lost_body(job_id, entry, exc) from None
        with body:
            response = writer.create_warc_record(
                entry.final_url,
                "response",
                payload=body,
                length=entry.size,
                warc_headers_dict={**extra, "WARC-Payload-Digest": digest},
                http_headers=StatusAndHeaders(
                    status, headers, protocol=entry.http_version or "HTTP/1.1"
                ),
            )
            request = writer.create_warc_record(
                entry.final_url,
                "request",
                warc_headers_dict=dict(extra),
                http_headers=StatusAndHeaders(
                    f"GET {path} {entry.http_version or 'HTTP/1.1'}",
                    [("Host", parts.netloc), ("User-Agent", FETCHER)],
                    is_http_request=True,
                ),
            )
            writer.write_request_response_pair(request, response)
        yield buf.getvalue()


def import_warc(
    snaps: SnapshotStore, path: str | os.PathLike[str], caller: str, *, max_bytes: int
) -> tuple[str, int]:
    """Import the WARC file at ``path`` as a new snapshot of ``caller``'s, pinned (it has no
    job, so no lease); returns its id (a job id) and how many responses it holds.

    Raises :class:`WarcError` naming the record for a truncated or malformed file, one with
    no response, or a body over ``max_bytes``; OSError if the file cannot be read,
    :class:`SnapshotFull` past the snapshots' bound. Nothing is
    kept then: the bodies written so far are deleted again, and the snapshot never appears.
    """
    from warcio.archiveiterator import ArchiveIterator

    name = os.fspath(path)
    job_id = new_job_id()
    staging = snaps.root / "jobs" / f".import-{job_id}"
    written: list[str] = []  # bodies this import wrote, deleted again if it fails
    count = 0
    index = 0
    try:
        with open(name, "rb") as f:
            if f.read(2) == b"\x1f\x8b":
                _check_gzip_members(f, name)
            f.seek(0)
            records = ArchiveIterator(f)
            try:
                for index, record in enumerate(records, start=1):
                    if record.rec_type != "response":
                        _drain(record, name, index)
                        continue
                    entry, data = _response(record, name, index, max_bytes)
                    if snaps.keep_body(entry.sha256, data):
                        written.append(entry.sha256)
                    target = staging / "targets" / f"{url_key(entry.url)}.json"
                    snaps.write_entry(target, entry)
                    count += 1
            except (WarcError, OSError, SnapshotError):
                raise
            except Exception as exc:
                # warcio meets a malformed record with whatever its parser raises.
                raise WarcError(
                    f"{name}: record {index + 1} is malformed: {_first_line(exc)}"
                ) from None
        if count == 0:
            raise WarcError(f"{name} holds no response record to replay")
        snaps.commit_import(staging, job_id, caller)
    except BaseException:
        snaps.remove_staging(staging)
        for sha in written:
            snaps.forget_body(sha)
        raise
    return job_id, count


def _response(record: Any, name: str, index: int, max_bytes: int) -> tuple[Entry, bytes]:
    """The entry and body of the response record ``record`` (the ``index``-th)."""
    where = f"{name}: record {index}"
    headers = record.rec_headers
    uri = headers.get_header("WARC-Target-URI")
    if not uri:
        raise WarcError(f"{where} is a response without WARC-Target-URI")
    http = record.http_headers
    if http is None:
        raise WarcError(f"{where} ({uri}) has no HTTP response headers")
    expected = (record.length or 0) - http.total_len
    if expected > max_bytes:
        raise WarcError(f"{where} ({uri}) holds {expected} bytes, more than {max_bytes}")
    raw = _read_exactly(record.raw_stream, expected)
    if len(raw) < expected:
        raise WarcError(
            f"{where} ({uri}) is cut short: {len(raw)} of its {expected} bytes are there"
        )
    record.raw_stream = io.BytesIO(raw)
    data = record.content_stream().read(max_bytes + 1)
    if len(data) > max_bytes:
        raise WarcError(f"{where} ({uri}) decodes to more than {max_bytes} bytes")
    status_text = http.get_statuscode() or "200"
    # Three ASCII digits, as HTTP/1.1 has them: int() also read "-5", "2_00", "٢٠٠" and
    # 23 nines, kept as they were and found out (or not) at replay.
    status = parse_count(status_text, max_digits=3)
    if status is None or status < 100:
        raise WarcError(
            f"{where} ({uri}) has the status {safe_text(status_text, 40)!r}, not three digits "
            "from 100 to 999"
        )
    pairs = tuple((str(k), str(v)) for k, v in http.headers)
    kept = tuple((k, v) for k, v in pairs if k.lower() not in _DROPPED)
    content_type = dict((k.lower(), v) for k, v in kept).get("content-type")
    media, charset = split_content_type(content_type)
    date = headers.get_header("WARC-Date") or ""
    entry = Entry(
        url=headers.get_header(TARGET_FIELD) or uri,
        final_url=uri,
        status=status,
        reason=http.statusline.partition(" ")[2],
        http_version=http.protocol or "HTTP/1.1",
        headers=kept,
        content_type=media,
        charset=charset,
        chain=() if not headers.get_header(TARGET_FIELD) else (headers.get_header(TARGET_FIELD),),
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        fetched_at=_epoch(date),
    )
    return entry, data


def _drain(record: Any, name: str, index: int) -> None:
    """Read a record that is not imported to its end, checking it is all there."""
    expected = record.length or 0
    if record.http_headers is not None:
        expected -= record.http_headers.total_len
    got = 0
    while True:
        chunk = record.raw_stream.read(_CHUNK)
        if not chunk:
            break
        got += len(chunk)
    if got < expected:
        raise WarcError(f"{name}: record {index} is cut short: {got} of its {expected} bytes")


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    parts: list[bytes] = []
    left = n
    while left > 0:
        chunk = stream.read(min(left, _CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _check_gzip_members(f: IO[bytes], name: str) -> None:
    """Raise :class:`WarcError` unless every gzip member of ``f`` ends (a file cut inside one
    reads as a clean end to a record iterator). Streams: memory holds one chunk."""
    f.seek(0)
    member, start, offset = 0, 0, 0
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    pending = b""
    while True:
        chunk = pending or f.read(_CHUNK)
        pending = b""
        if not chunk:
            break
        try:
            inflater.decompress(chunk)
        except zlib.error as exc:
            raise WarcError(
                f"{name}: gzip member {member + 1} (at byte {start}) is damaged: {exc}"
            ) from None
        if inflater.eof:
            rest = inflater.unused_data
            offset += len(chunk) - len(rest)
            member, start = member + 1, offset
            inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
            pending = rest
        else:
            offset += len(chunk)
    if offset > start:  # bytes of a member that never ended
        raise WarcError(
            f"{name} is cut short: gzip member {member + 1} (the record at byte {start}) "
            "does not end"
        )


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch(iso: str) -> float:
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    return 0.0


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
