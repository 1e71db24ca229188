"""A real OTLP/HTTP trace receiver on 127.0.0.1: decodes each export (opentelemetry-proto)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from .threaded_server import ThreadedServer

#: The most one wait may take: a guard against a hang, not a speed check.
HANG_GUARD = 120.0


@dataclass
class Received:
    """What the receiver was sent: every span, with its resource's attributes."""

    spans: list[tuple[dict[str, object], Span]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, predicate: Callable[[list[Span]], bool]) -> list[Span]:
        """Wait until ``predicate`` holds for the spans received so far; returns them."""
        with self.changed:
            done = self.changed.wait_for(
                lambda: predicate([span for _, span in self.spans]), HANG_GUARD
            )
            assert done, f"the spans never matched; received {[s.name for _, s in self.spans]}"
            return [span for _, span in self.spans]


def attributes(items: object) -> dict[str, object]:
    """OTLP key-values as a dict of plain values."""
    out: dict[str, object] = {}
    for kv in items:  # type: ignore[attr-defined]
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """Serve OTLP/HTTP on a free port of 127.0.0.1; yields its endpoint and what it received."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True  # as local_server.py: no 40 ms wait for a delayed ACK

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            request = ExportTraceServiceRequest.FromString(body)
            with received.changed:
                for resource_spans in request.resource_spans:
                    resource = attributes(resource_spans.resource.attributes)
                    for scope_spans in resource_spans.scope_spans:
                        received.spans.extend((resource, span) for span in scope_spans.spans)
                received.changed.notify_all()
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadedServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
