"""A real HTTPS server on 127.0.0.1 that counts what it sees, with a trustme certificate.

HTTP/1.1 with keep-alive, one thread per connection. It counts connections accepted, requests
per path, and requests in flight per ``Host`` name (the most it ever saw at once), so tests can
check connection reuse and per-host limits from the server's side. Routes:

- ``/page?n=I&delay=S``: a small HTML page (``PAGE`` with ``I`` in it), sent after ``S``
  seconds (at most 1; default 0), as a real site takes time to answer.
- ``/hold?status=C&after=S&to=URL``: waits until ``release`` is set, then answers ``C`` (200),
  with ``Retry-After: S`` and ``Location: URL`` if given.
- ``/throttle?after=S&times=K``: the first ``K`` requests for this exact URL answer 429 (with
  ``Retry-After: S`` if given), later ones 200.
- ``/stall``: headers and half the body, then nothing until ``release`` is set.
- ``/trickle``: the same, until ``trickle`` is set.
- ``/robots.txt``: ``robots`` (404 while it is None; a three-digit string answers that
  status), its bytes served as they are.
- ``/redirect?to=PATH``: a 302 to ``PATH``.
- ``/unavailable?after=S``: a 503 with ``Retry-After: S``.

The certificate is valid for ``localhost``, ``127.0.0.1`` and the names in ``NAMES`` (tests
point those at 127.0.0.1 through the SSRF policy's resolver). Run as a module
(``python -m tests.support.tls_server CERT_DIR``) it serves in its own process, writes its CA
to ``CERT_DIR/ca.pem`` and prints its port: the fetch benchmark does that.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trio
import trustme

from trio_batch.fetchers import DestinationPolicy

from .threaded_server import ThreadedServer

#: Host names the certificate covers besides localhost and 127.0.0.1.
NAMES = ("a.test", "b.test", "site.test")
#: How long a held request waits at most if a test never releases it.
HOLD_TIMEOUT = 20.0
#: A page of about 4 KiB, like the issue's benchmark pages.
PAGE = (
    "<!doctype html><html><head><title>Page {n}</title></head><body><h1>Page {n}</h1>"
    + "".join(f"<p>Paragraph {i} of page {{n}}: some words to read.</p>" for i in range(80))
    + "</body></html>"
)


class HandshakeInHandler(BaseHTTPRequestHandler):
    """A handler that makes its connection's TLS handshake in its own thread, not in the
    server's accept loop (a client that connects and never says hello would hold every
    other connection, and ``shutdown()``, behind it). A plain socket is left as it is;
    the server wraps its sockets with ``do_handshake_on_connect=False``."""

    disable_nagle_algorithm = True  # as local_server.py: no 40 ms wait for a delayed ACK

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            try:
                self.request.do_handshake()
            except (OSError, ssl.SSLError):
                self.request.close()
                raise
        super().setup()

    def log_message(self, format: str, *args: object) -> None:
        pass


class TLSServer(ThreadedServer):
    """The server and its counters (read them under ``lock``, or through the helpers)."""

    def __init__(self, ca: trustme.CA) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        cert = ca.issue_cert("localhost", "127.0.0.1", *NAMES)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.context)
        self.lock = threading.Lock()
        self.connections = 0  # accepted in all
        self.open_connections = 0  # accepted and not yet closed
        self.requests: Counter[str] = Counter()
        self.in_flight: Counter[str] = Counter()
        self.most_in_flight: Counter[str] = Counter()
        self.release = threading.Event()
        self.trickle = threading.Event()
        #: /robots.txt: None answers 404, a status code ("403") that status, else the text.
        self.robots: str | bytes | None = None

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.server_address[1])

    def url(self, path: str, host: str = "localhost") -> str:
        """``https://HOST:PORT/path``."""
        return f"https://{host}:{self.port}{path}"

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        with self.lock:
            self.connections += 1
            self.open_connections += 1
        # The handshake runs in the connection's own thread (_Handler.setup), not here.
        wrapped = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return wrapped, addr

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        with self.lock:
            self.open_connections -= 1

    def count(self, path: str) -> int:
        """Requests seen for ``path`` (query string included)."""
        with self.lock:
            return self.requests[path]

    def now_in_flight(self, host: str) -> int:
        """Requests to ``host`` being answered right now."""
        with self.lock:
            return self.in_flight[host]


class _Handler(HandshakeInHandler):
    protocol_version = "HTTP/1.1"
    server: TLSServer

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (OSError, ssl.SSLError):
            self.close_connection = True  # the client went away: that is what cancels do

    def _send(self, code: int, body: bytes, **headers: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        srv = self.server
        with srv.lock:
            srv.requests[self.path] += 1
            seen = srv.requests[self.path]
            srv.in_flight[host] += 1
            srv.most_in_flight[host] = max(srv.most_in_flight[host], srv.in_flight[host])
        try:
            self._answer(seen)
        finally:
            with srv.lock:
                srv.in_flight[host] -= 1

    def _answer(self, seen: int) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if parts.path == "/page":
            time.sleep(min(float(query.get("delay", "0")), 1.0))
            self._send(200, PAGE.format(n=query.get("n", "0")).encode())
        elif parts.path == "/hold":
            self.server.release.wait(HOLD_TIMEOUT)
            headers = {"Retry_After": query["after"]} if "after" in query else {}
            if "to" in query:
                headers["Location"] = query["to"]
            self._send(int(query.get("status", "200")), b"held, then released", **headers)
        elif parts.path == "/throttle":
            if seen <= int(query.get("times", "1")):
                headers = {"Retry_After": query["after"]} if "after" in query else {}
                self._send(429, b"slow down", **headers)
            else:
                self._send(200, b"fine now")
        elif parts.path == "/robots.txt":
            robots = self.server.robots
            if robots is None:
                self._send(404, b"no robots here")
            elif isinstance(robots, str) and len(robots) == 3 and robots.isdigit():
                self._send(int(robots), b"no robots here")
            else:
                self._send(200, robots.encode() if isinstance(robots, str) else robots)
        elif parts.path == "/redirect":
            self._send(302, b"", Location=query["to"])
        elif parts.path == "/unavailable":
            self._send(503, b"down for a moment", Retry_After=query["after"])
        elif parts.path in ("/stall", "/trickle"):
            self.send_response(200)
            self.send_header("Content-Length", "10")
            self.end_headers()
            self.wfile.write(b"12345")
            self.wfile.flush()
            gate = self.server.release if parts.path == "/stall" else self.server.trickle
            gate.wait(HOLD_TIMEOUT)
            self.wfile.write(b"67890")
        else:
            self._send(404, b"unknown")


def start(ca: trustme.CA) -> TLSServer:
    """A started server (serving in a daemon thread); ``shutdown()`` it when done."""
    srv = TLSServer(ca)
    threading.Thread(target=srv.serve_forever, args=(0.01,), daemon=True).start()
    return srv


@pytest.fixture(scope="session")
def tls_ca() -> trustme.CA:
    """A certificate authority for the session's test servers."""
    return trustme.CA()


@pytest.fixture
def client_tls(tls_ca: trustme.CA) -> ssl.SSLContext:
    """A client TLS context trusting ``tls_ca``."""
    context = ssl.create_default_context()
    tls_ca.configure_trust(context)
    return context


@pytest.fixture
def tls_server(tls_ca: trustme.CA) -> Iterator[TLSServer]:
    """A fresh HTTPS server for one test; held requests are released at the end."""
    srv = start(tls_ca)
    try:
        yield srv
    finally:
        srv.release.set()
        srv.trickle.set()
        srv.shutdown()
        srv.server_close()


def main(cert_dir: str) -> None:
    """Serve in this process until killed; the CA goes to ``cert_dir/ca.pem``."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(Path(cert_dir) / "ca.pem"))
    srv = TLSServer(ca)
    srv.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    print(srv.port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])


async def to_loopback(host: str, port: int) -> list[str]:
    """A resolver sending every name to 127.0.0.1 (for ``DestinationPolicy(resolver=...)``)."""
    return ["127.0.0.1"]


def loopback_names() -> DestinationPolicy:
    """A policy that reaches this server under any of ``NAMES`` (each its own host)."""
    return DestinationPolicy(allow_networks=["127.0.0.1/32"], resolver=to_loopback)


async def until(condition: Callable[[], bool], *, limit: float = HOLD_TIMEOUT) -> None:
    """Wait until ``condition()`` holds, looking every few milliseconds of real time.

    The wait is on the condition, not on trio's clock, so it works under a frozen MockClock;
    ``limit`` (real seconds) only stops a broken test from hanging.
    """
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition never held")
        await trio.to_thread.run_sync(time.sleep, 0.002)
