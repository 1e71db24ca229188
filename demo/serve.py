"""A small fixture web server for the demo: the pages in demo/site/, a slow page and a redirect.

Listens on 127.0.0.1 only, on a free port chosen by the OS. Run it on its own to poke at it::

    python demo/serve.py        # prints its base URL; Ctrl-C stops it

Routes besides the files: ``/slow`` (and ``/slow/ANYTHING``) answers after 1.5 seconds,
``/old-news`` redirects to ``/index.html``, and anything unknown is a 404.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SITE = Path(__file__).resolve().parent / "site"
SLOW_SECONDS = 1.5


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the demo's output to what trio-batch shows

    def do_GET(self) -> None:
        if self.path == "/slow" or self.path.startswith("/slow/"):
            time.sleep(SLOW_SECONDS)
            body = b"The tide table, computed slowly.\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)  # the client may have gone (make demo-cluster kills one)
        elif self.path == "/old-news":
            self.send_response(301)
            self.send_header("Location", "/index.html")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            super().do_GET()

    def list_directory(self, path: str | os.PathLike[str]) -> io.BytesIO | None:
        self.send_error(404, "no directory listings here")
        return None


class DemoServer(ThreadingHTTPServer):
    """The fixture server; :meth:`start` serves it from a background thread."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), partial(_Handler, directory=str(SITE)))
        self._thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True)

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> DemoServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


if __name__ == "__main__":
    server = DemoServer()
    print(f"serving {SITE} on {server.base} (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever(0.05)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
