"""A real HTTP server on 127.0.0.1 for the fetcher and CLI tests (no mocks of httpx).

A ``ThreadingHTTPServer`` on port 0 in a background thread. Its routes cover every path the
fetcher takes: HTML, JSON, text (one holding script payloads), a PDF, binary bodies, 4xx/5xx,
redirects (relative, looping, to other schemes), big bodies with and without Content-Length, a
flaky page that fails a given number of times (with ``Retry-After``) before it succeeds, and a
gated page that holds its response until the test releases it (to have a fetch reliably in
flight).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from .threaded_server import ThreadedServer

#: How long a gated request waits at most if a test never releases it.
GATE_TIMEOUT = 20.0

HTML = """<!doctype html>
<html><head><title>Fixture page</title><style>body { color: red }</style>
<script>var hidden = "script text";</script></head>
<body>
<h1>Trio batch fixture</h1>
<p>The first paragraph mentions <b>apples</b>.</p>
<p>The second paragraph mentions pears.</p>
<ul><li>alpha</li><li>beta</li></ul>
</body></html>
"""

DATA = {"name": "fixture", "items": [{"id": 1, "tag": "a"}, {"id": 2, "tag": "b"}], "n": 2}

#: Markup that would run script if a page rendered it as HTML: each part sets ``window.__pwned``.
PAYLOAD = (
    "<script>window.__pwned = 'script'</script>"
    "<img src=x onerror=\"window.__pwned = 'img'\">"
    "<svg onload=\"window.__pwned = 'svg'\"></svg>"
)

#: Text that steers a terminal if printed raw: a window title, clear screen, NUL, DEL, an 8-bit CSI
#: and a right-to-left override that makes ``gnp.exe`` read ``exe.png``.
CONTROLS = "title \x1b]0;PWNED\x07\x1b[2J nul\x00 del\x7f csi\x9b31m \u202egnp.exe\nsecond line\n"

#: The body of ``/versioned`` (then a space and its version) and its ``Last-Modified``.
VERSIONED = "versioned page"
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"

TEXT = "\n".join(f"line {i}: {'match' if i in (3, 4, 9) else 'plain'}" for i in range(1, 13))


def make_pdf(pages: list[str]) -> bytes:
    """A minimal, valid PDF with one line of Helvetica text per page."""
    n = len(pages)
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(f"{3 + 2 * i} 0 R".encode() for i in range(n))
        + f"] /Count {n} >>".encode(),
    ]
    font = 3 + 2 * n
    for i, text in enumerate(pages):
        stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


PDF = make_pdf(["First page text", "Second page text", "Third page text"])


class LocalServer(ThreadedServer):
    """The server, with the events the gated routes use."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.gate = threading.Event()  # set: gated requests may finish
        self.gate_entered = threading.Event()  # set once a gated request has arrived
        self.requests: list[str] = []  # paths requested, in order
        self.version = 1  # /versioned's version: its ETag and body change with it
        self._lock = threading.Lock()

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` on this server."""
        return self.base + path

    def count(self, path: str) -> int:
        """How many requests for ``path`` (query string included) the server has seen."""
        with self._lock:
            return self.requests.count(path)

    def record(self, path: str) -> None:
        with self._lock:
            self.requests.append(path)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body go out in separate writes: with Nagle's algorithm the body
    # waits for the client's delayed ACK, 40 ms a request on Linux.
    disable_nagle_algorithm = True
    server: LocalServer

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep test output clean

    def _send(self, code: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.record(self.path)
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        path = parts.path
        if path == "/page.html":
            self._send(200, HTML.encode(), "text/html; charset=utf-8")
        elif path == "/data.json":
            self._send(200, json.dumps(DATA).encode(), "application/json")
        elif path == "/text.txt":
            self._send(200, TEXT.encode(), "text/plain; charset=utf-8")
        elif path == "/payload.txt":
            self._send(200, PAYLOAD.encode(), "text/plain; charset=utf-8")
        elif path == "/controls.txt":
            self._send(200, CONTROLS.encode(), "text/plain; charset=utf-8")
        elif path == "/latin1.txt":
            self._send(200, "café crème".encode("latin-1"), "text/plain; charset=iso-8859-1")
        elif path == "/latin1-quoted.txt":  # the charset as a quoted string (RFC 9110)
            self._send(200, "café crème".encode("latin-1"), 'text/plain; charset="ISO-8859-1"')
        elif path == "/latin1-spaced.txt":
            self._send(200, "café crème".encode("latin-1"), "text/plain;Charset = 'latin1' ")
        elif path == "/doc.bin":  # a PDF told only by its first bytes
            self._send(200, PDF, "application/octet-stream")
        elif path == "/doc.pdf":
            self._send(200, PDF, "application/pdf")
        elif path == "/broken.pdf":
            self._send(200, b"%PDF-1.4\nthis is not really a pdf", "application/pdf")
        elif path == "/image.png":
            self._send(200, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), "image/png")
        elif path == "/missing":
            self._send(404, b"not here", "text/plain")
        elif path == "/error":
            self._send(500, b"boom", "text/plain")
        elif path == "/redirect":
            self._send(302, b"", "text/plain", Location=query.get("to", "/page.html"))
        elif path == "/loop":
            self._send(302, b"", "text/plain", Location="/loop")
        elif path == "/big":
            self._send(200, b"x" * int(query.get("n", "1000")), "text/plain")
        elif path == "/big-chunked":
            self._chunked(int(query.get("n", "1000")))
        elif path == "/gate":
            self.server.gate_entered.set()
            self.server.gate.wait(GATE_TIMEOUT)
            self._send(200, b"released", "text/plain")
        elif path == "/stall":
            # Headers and a first chunk, then nothing until the gate opens.
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "10")
            self.end_headers()
            self.wfile.write(b"12345")
            self.wfile.flush()
            self.server.gate.wait(GATE_TIMEOUT)
            self.wfile.write(b"67890")
        elif path == "/flaky":
            # The first `fail` requests for this exact URL answer `status`, with `Retry-After:
            # after` if given; later ones succeed.
            if self.server.count(self.path) <= int(query.get("fail", "2")):
                headers = {"Retry_After": query["after"]} if "after" in query else {}
                self._send(int(query.get("status", "503")), b"try later", "text/plain", **headers)
            else:
                self._send(200, b"fine now", "text/plain")
        elif path == "/slow":
            time.sleep(min(float(query.get("s", "0.2")), 2.0))
            self._send(200, b"slow but done", "text/plain")
        elif path == "/versioned":
            # A page with validators: answers 304 to a request that names its ETag (the
            # body is ``VERSIONED`` until a test changes ``server.version``).
            etag = f'"v{self.server.version}"'
            if self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                body = f"{VERSIONED} {self.server.version}".encode()
                self._send(
                    200, body, "text/plain; charset=utf-8", ETag=etag, Last_Modified=LAST_MODIFIED
                )
        elif path == "/generated":
            self._send(200, *_generated(query.get("what", ""), int(query.get("n", "1"))))
        elif path.startswith("/pages/"):
            page = PAGES / path.removeprefix("/pages/")
            if page.parent == PAGES and page.is_file():
                self._send(200, page.read_bytes(), "text/html; charset=utf-8")
            else:
                self._send(404, b"no such page", "text/plain")
        else:
            self._send(404, b"unknown fixture", "text/plain")

    def _chunked(self, n: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            remaining = n
            while remaining:
                size = min(remaining, 4096)
                self.wfile.write(f"{size:x}\r\n".encode() + b"y" * size + b"\r\n")
                remaining -= size
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client stopped reading: that is what the size cap does


#: The realistic pages served as ``/pages/NAME`` (an article, a docs page, a product page...).
PAGES = Path(__file__).resolve().parents[1] / "fetchers" / "data" / "pages"


def _generated(what: str, n: int) -> tuple[bytes, str]:
    """``/generated?what=...&n=N``: a body built to size: nested, long or undecodable."""
    if what == "deep-json":
        return b"[" * n + b"]" * n, "application/json"
    if what == "deep-html":
        return b"<!doctype html><html><body>" + b"<div>x" * n + b"</body></html>", "text/html"
    if what == "line":
        return b"a" * n + b"\n", "text/plain"
    if what == "undecodable":  # each byte decodes to U+FFFD, three bytes in UTF-8
        return b"\xff" * n, "text/plain"
    raise ValueError(f"nothing to generate for {what!r}")


@pytest.fixture
def server() -> Iterator[LocalServer]:
    """A fresh local server for one test; gated requests are released at the end."""
    srv = LocalServer()
    thread = threading.Thread(target=srv.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.gate.set()
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)
