"""A loopback TCP proxy whose connections a test can cut, hold or slow: network faults on demand.

In front of an HTTP service (``http://127.0.0.1:PORT``) or a PostgreSQL server's Unix socket
(a path): :meth:`CuttableProxy.cut` resets every connection, :meth:`CuttableProxy.hold`
stops all traffic both ways without closing anything (a partition: the kernel still
acknowledges what was sent, so only the client's own bounds notice), :meth:`CuttableProxy.hold_on`
holds it from the moment the client sends given bytes (a statement of the test's choosing), and
:attr:`CuttableProxy.latency` delays every chunk each way.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class CuttableProxy:
    """A loopback TCP proxy in front of ``upstream`` whose connections a test can cut.

    Records every byte the client sent (:attr:`sent`); while :attr:`refusing` is set, new
    connections are accepted and closed at once, as a service out of reach would look.
    """

    def __init__(self, upstream: str) -> None:
        self._unix = upstream if upstream.startswith("/") else None
        if self._unix is None:
            host, port = upstream.removeprefix("http://").split(":")
            self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.refusing = False
        #: Seconds each chunk waits before it is passed on, each way.
        self.latency = 0.0
        self.sent = bytearray()
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._hold_on: bytes | None = None
        #: Set once :meth:`hold_on`'s bytes were seen and the traffic held.
        self.held = threading.Event()
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> CuttableProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        self._flowing.set()
        self.cut()

    def cut(self) -> None:
        """Close every open connection, both ways."""
        with self._lock:
            conns, self._open = self._open, []
        for conn in conns:
            _shut(conn)
            conn.close()

    def hold(self) -> None:
        """Stop passing traffic, both ways, on every connection, open or new (a partition)."""
        self._flowing.clear()

    def hold_on(self, pattern: bytes) -> None:
        """Hold all traffic (as :meth:`hold`) once the client sends ``pattern``, before it is
        passed on; :attr:`held` is set then."""
        with self._lock:
            self._hold_on = pattern
            self.held.clear()

    def release(self) -> None:
        """Pass traffic again; what was held goes through, in order."""
        self._flowing.set()

    @property
    def holding(self) -> bool:
        """Whether traffic is held."""
        return not self._flowing.is_set()

    def _connect_upstream(self) -> socket.socket:
        if self._unix is not None:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(self._unix)
            return conn
        return socket.create_connection(self._upstream)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self.refusing:
                client.close()
                continue
            upstream = self._connect_upstream()
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if self.latency:
                    time.sleep(self.latency)
                if record:
                    self._hold_if_seen(data)
                self._flowing.wait()
                if record:
                    with self._lock:
                        self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _shut(src)
            _shut(dst)

    def _hold_if_seen(self, data: bytes) -> None:
        with self._lock:
            pattern = self._hold_on
            # The bytes sent before count too: a pattern may straddle two chunks.
            if pattern is not None and pattern in bytes(self.sent[-len(pattern) :]) + data:
                self._hold_on = None
                self._flowing.clear()
                self.held.set()


def _shut(conn: socket.socket) -> None:
    """End both directions of ``conn`` (the peer sees the connection drop); it may be gone."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
