"""The suite's local HTTP servers take a burst of connections at once.

With ``socketserver``'s default listen backlog of 5, the kernel drops the connects past the
sixth while the server has not accepted yet, and each retries only after its one-second SYN
timeout: a benchmark round that opens 8 connections ran at a quarter of its speed.
"""

from __future__ import annotations

import errno
import select
import socket
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trustme

from tests.support.local_server import LocalServer
from tests.support.threaded_server import ThreadedServer
from tests.support.tls_server import TLSServer
from tests.support.webhook_receiver import Receiver

BURST = 16

SERVERS: dict[str, Callable[[], ThreadingHTTPServer]] = {
    "base": lambda: ThreadedServer(("127.0.0.1", 0), BaseHTTPRequestHandler),
    "local": LocalServer,
    "tls": lambda: TLSServer(trustme.CA()),
    "webhook receiver": lambda: Receiver(trustme.CA()),
}


@pytest.mark.parametrize("make", SERVERS.values(), ids=SERVERS.keys())
def test_a_burst_of_connects_all_complete_before_the_server_accepts(
    make: Callable[[], ThreadingHTTPServer],
) -> None:
    server = make()  # listening, but nothing accepts: every connect waits in the backlog
    clients = [socket.socket() for _ in range(BURST)]
    try:
        for client in clients:
            client.setblocking(False)
            assert client.connect_ex(server.server_address) in (0, errno.EINPROGRESS)
        # Until half the kernel's first SYN retry: a dropped connect is still pending then.
        pending, deadline = set(clients), time.monotonic() + 0.5
        while pending and (left := deadline - time.monotonic()) > 0:
            _, connected, _ = select.select([], list(pending), [], left)
            pending -= set(connected)
        assert not pending, f"{len(pending)} of {BURST} connects dropped"
        assert all(c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for c in clients)
    finally:
        for client in clients:
            client.close()
        server.server_close()
