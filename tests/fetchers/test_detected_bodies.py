"""What a body is, told from its headers and its bytes: a quoted charset decodes as that
charset, and a PDF known only by its ``%PDF-`` bytes is read as a PDF, in the bounded worker
like one served as ``application/pdf``."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from trio_batch import Target
from trio_batch.fetchers import ContentError, HttpFetcher

from ..support.local_server import LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

MIB = 1024 * 1024


@pytest.mark.parametrize("path", ["/latin1.txt", "/latin1-quoted.txt", "/latin1-spaced.txt"])
async def test_a_charset_is_read_quoted_or_not(server: LocalServer, path: str) -> None:
    result = await HttpFetcher(trust_env=False)(Target(server.url(path)))
    assert result.content == "café crème"


async def test_a_pdf_told_by_its_bytes_is_read_as_a_pdf(server: LocalServer) -> None:
    result = await HttpFetcher(trust_env=False)(Target(server.url("/doc.bin")))
    assert result.meta["content_type"] == "application/octet-stream"
    assert result.meta["pdf_pages"] == 3
    assert "Second page text" in result.content


def _inflating_pdf(size: int) -> bytes:
    """A one-page PDF of 70 KB whose content stream inflates to ``size`` bytes."""
    content = b"BT /F1 24 Tf 72 720 Td (bomb) Tj ET\n%" + b" " * size + b"\n"
    stream = zlib.compress(content, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(stream)} /Filter /FlateDecode >>\nstream\n".encode()
        + stream
        + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\n".encode()
    return bytes(out + f"startxref\n{xref}\n%%EOF\n".encode())


async def test_a_pdf_told_by_its_bytes_is_processed_within_the_memory_limit(
    tmp_path: Path,
) -> None:
    # 74 MB inflated (under pypdf's own 75 MB cap) is past a 64 MiB worker: only a worker
    # with the limit fails it, and at once.
    bomb = tmp_path / "report.bin"
    bomb.write_bytes(_inflating_pdf(74_000_000))
    fetcher = HttpFetcher(process_memory=64 * MIB, process_timeout=60)
    with pytest.raises(ContentError, match=r"ran out of memory \(limit 64 MiB\)"):
        await fetcher(Target(bomb.as_uri()))
