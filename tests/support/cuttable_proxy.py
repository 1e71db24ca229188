"""A loopback TCP proxy whose connections a test can cut: a service dropping out of reach."""

from __future__ import annotations

import contextlib
import socket
import threading


class CuttableProxy:
    """A loopback TCP proxy in front of the service whose connections a test can cut.

    Records every byte the browser sent (:attr:`sent`); while :attr:`refusing` is set, new
    connections are accepted and closed at once, as a service out of reach would look.
    """

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.refusing = False
        self.sent = bytearray()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> CuttableProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        self.cut()

    def cut(self) -> None:
        """Close every open connection, both ways."""
        with self._lock:
            conns, self._open = self._open, []
        for conn in conns:
            _shut(conn)
            conn.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self.refusing:
                client.close()
                continue
            upstream = socket.create_connection(self._upstream)
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if record:
                    with self._lock:
                        self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _shut(src)
            _shut(dst)


def _shut(conn: socket.socket) -> None:
    """End both directions of ``conn`` (the peer sees the connection drop); it may be gone."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
