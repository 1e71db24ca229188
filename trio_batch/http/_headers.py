"""Headers every answer of the service carries, whatever route or error produced it.

The JSON API returns callers' data, fetched content included: no browser may sniff it as HTML,
frame it, or keep it in a shared cache. The dashboard's files send stricter headers of their
own (:data:`~trio_batch.http._dashboard.DASHBOARD_HEADERS`); a header a response sets itself
is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["API_HEADERS", "SecurityHeaders"]

#: Added to every response that does not set the header itself.
API_HEADERS: Mapping[str, str] = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_RAW = [
    (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in API_HEADERS.items()
]


class SecurityHeaders:
    """ASGI middleware adding :data:`API_HEADERS` to each response that lacks them, and
    sending each response's last body message shielded from cancellation (see below).

    Starlette's error middleware answers a failed handler outside every other middleware, so
    problem responses carry the same headers themselves (see ``Problem.response``).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers: list[Any] = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers.extend(item for item in _RAW if item[0] not in present)
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                # The server may close the connection inside the last send (a client that
                # asked to close, or HTTP/1.0), and a streamed answer cancels its sender as
                # soon as the server reports the stream ended: unshielded, the close is cut
                # halfway and the socket stays open. Bounded: the server's own write of the
                # last bytes is shielded already; what is added is the socket's close.
                with trio.CancelScope(shield=True):
                    await send(message)
                return
            await send(message)

        await self.app(scope, receive, send_with_headers)
