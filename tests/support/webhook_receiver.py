"""A real HTTPS webhook receiver on 127.0.0.1 that checks every delivery's signature.

A ``ThreadingHTTPServer`` on port 0 in a background thread, behind TLS with a certificate from
a trustme CA (the sender trusts that CA). Each POST is verified with the ``standardwebhooks``
library, the way a user's receiver would, and recorded; the first ``fail_first`` deliveries
are answered 503 (a receiver that is down), and ``hold`` keeps answers back until released
(a delivery reliably in flight). ``answer`` sets the status of the others (default 204).
``tls=False`` serves plain http (for a ``trio-batch serve`` process, which trusts only the
public CAs).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import ssl
import threading
from base64 import b64encode
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import trustme
from standardwebhooks import Webhook, WebhookVerificationError

from .threaded_server import ThreadedServer
from .tls_server import HandshakeInHandler

#: How long a held answer waits at most if a test never releases it (seconds).
HOLD_TIMEOUT = 30.0


@dataclass
class Received:
    """One delivery as the receiver saw it."""

    webhook_id: str
    verified: bool
    payload: Any
    headers: dict[str, str]
    answered: int


class Receiver(ThreadedServer):
    """The server; its deliveries in :attr:`received`, in arrival order."""

    def __init__(self, ca: trustme.CA, *, tls: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.tls = tls
        self.context: ssl.SSLContext | None = None
        if tls:
            cert = ca.issue_cert("127.0.0.1", "localhost")
            self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            cert.configure_cert(self.context)
        self.connections = 0  # accepted, under ``changed``
        self.secret = "whsec_" + b64encode(secrets.token_bytes(32)).decode()
        self.verifier = Webhook(self.secret)
        self.client_context = ssl.create_default_context()
        ca.configure_trust(self.client_context)
        self.received: list[Received] = []
        self.arrivals = 0  # requests read, answered or not
        self.fail_first = 0
        self.answer = 204
        self.answer_body = b""
        self.hold = threading.Event()
        self.hold.set()
        #: Cleared: the answer's status and first bytes are sent, the body's last byte waits.
        self.body_flows = threading.Event()
        self.body_flows.set()
        #: Set once an answer's status and first bytes are out and its last byte waits.
        self.body_stalled = threading.Event()
        self.changed = threading.Condition()

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        with self.changed:
            self.connections += 1
            self.changed.notify_all()
        if self.context is None:
            return sock, addr
        # The handshake runs in the connection's own thread (_Handler.setup), not here: in the
        # accept loop, a client that connected and never said hello (a delivery cut at the
        # end of a test) held the loop, and shutdown() with it, for ever.
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server_address[1]}/hook"

    def accepted(self) -> list[Received]:
        """The verified deliveries answered with a 2xx."""
        with self.changed:
            return [r for r in self.received if r.verified and 200 <= r.answered < 300]

    def wait_for_request(self, n: int, *, timeout: float = 60.0) -> None:
        """Block (a thread) until ``n`` requests have been read, answered or not."""
        with self.changed:
            if not self.changed.wait_for(lambda: self.arrivals >= n, timeout):
                raise AssertionError(f"{self.arrivals} requests arrived, not {n}")

    def wait_for(self, n: int, *, timeout: float = 60.0) -> list[Received]:
        """Block (a thread) until ``n`` deliveries have arrived; all of them."""
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.received) >= n, timeout):
                raise AssertionError(f"{len(self.received)} deliveries arrived, not {n}")
            return list(self.received)


class _Handler(HandshakeInHandler):
    server: Receiver

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            payload = self.server.verifier.verify(body, headers)
            verified = True
        except WebhookVerificationError:
            payload, verified = json.loads(body or b"null"), False
        server = self.server
        with server.changed:
            failing = sum(1 for r in server.received if r.answered == 503) < server.fail_first
            server.arrivals += 1
            server.changed.notify_all()
        code = 503 if failing else (server.answer if verified else 400)
        server.hold.wait(HOLD_TIMEOUT)
        with server.changed:
            server.received.append(
                Received(headers.get("webhook-id", ""), verified, payload, headers, code)
            )
            server.changed.notify_all()
        stalling = not server.body_flows.is_set()
        self.send_response(code)
        self.send_header("Content-Length", str(len(server.answer_body) + stalling))
        self.end_headers()
        self.wfile.write(server.answer_body)
        if stalling:
            self.wfile.flush()
            server.body_stalled.set()
            server.body_flows.wait(HOLD_TIMEOUT)
            self.wfile.write(b".")


@pytest.fixture(scope="session")
def webhook_ca() -> trustme.CA:
    return trustme.CA()


@contextlib.contextmanager
def receiving(ca: trustme.CA, *, tls: bool = True) -> Iterator[Receiver]:
    """A receiver serving in a thread for the block."""
    server = Receiver(ca, tls=tls)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.hold.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver(webhook_ca: trustme.CA) -> Iterator[Receiver]:
    with receiving(webhook_ca) as server:
        yield server
