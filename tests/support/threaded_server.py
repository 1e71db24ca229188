"""The base of the suite's local HTTP servers: a ``ThreadingHTTPServer`` that takes a burst of
connections at once.

``socketserver``'s listen backlog is 5. A client that opens more connections than that at
once (httpx opening 8 to one host, a test starting many fetches) has its extra connects
dropped by the kernel, and each retries its SYN only after a second: a test waits, a
benchmark round runs at a quarter of its speed. A backlog of 128 takes any burst the suite
makes.
"""

from __future__ import annotations

from http.server import ThreadingHTTPServer


class ThreadedServer(ThreadingHTTPServer):
    """One thread per connection, daemon threads, a listen backlog of 128."""

    daemon_threads = True
    request_queue_size = 128
