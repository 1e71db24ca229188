"""Serving: :func:`serve` runs an application on Hypercorn's trio worker (the command line
that builds one is :mod:`trio_batch.cli`'s ``serve``)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import cast

import trio
from starlette.applications import Starlette

from .._text import check_seconds, parse_count, safe_text
from ._problems import Problem
from ._service import Service

__all__ = ["SEND_TIMEOUT", "serve"]

#: Seconds a write to a client may make no progress before the connection is closed: a
#: client that stops reading an event stream or an export is let go, its task ended.
SEND_TIMEOUT = 60.0

_log = logging.getLogger("trio_batch.http")


def check_bind(bind: str) -> str:
    """``bind`` if it is ``HOST:PORT`` with a port from 0 to 65535 in ASCII digits (an IPv6
    host in brackets), or one of Hypercorn's ``unix:PATH`` and ``fd://N``; else ValueError
    naming it. Hypercorn read the port with int(): ``٣٠٠٠`` and ``1_0000`` served on 3000 and
    10000, and 70000 failed in a traceback (OverflowError) after the store was opened."""
    if bind.startswith(("unix:", "fd://")):
        return bind
    host, colon, port = bind.rpartition(":")
    number = parse_count(port, max_digits=5)
    if not colon or not host or number is None or number > 65535:
        raise ValueError(
            f"bind is HOST:PORT with a port from 0 to 65535, not {safe_text(bind, 80)!r}"
        )
    return bind


async def serve(
    app: Starlette,
    *,
    bind: str = "127.0.0.1:8000",
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    graceful_timeout: float = 5.0,
    freeze_heap: bool = False,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` (from :func:`create_app`) with Hypercorn's trio worker until shut down.

    ``bind`` is ``HOST:PORT`` (port 0 picks a free one; see :func:`check_bind`, whose
    ValueError it raises); ``task_status.started`` receives the bound URLs, e.g.
    ``["http://127.0.0.1:50123"]``, once the lifespan has started (the store is open and the
    runner holds it): a start-up failure (the database held by another runner,
    the port in use) raises and is never announced. When ``shutdown_trigger`` returns, new
    jobs are refused, event streams end, requests in progress get ``graceful_timeout`` seconds
    to finish, and the lifespan shuts the runner down (live jobs marked failed "shutdown").
    A connection whose client stops reading (a write makes no progress for
    :data:`SEND_TIMEOUT` seconds) is closed, and its answer ends.

    ``freeze_heap``: once the service is up, collect garbage and :func:`gc.freeze` what is
    left (the modules, the app, the runner), so a full collection under load walks only what
    requests allocate since. The process's heap is its owner's: ``trio-batch serve`` asks
    for it; a program that embeds the service decides for itself.
    """
    check_bind(bind)
    check_seconds("graceful_timeout", graceful_timeout)
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.trio import serve as hypercorn_serve
    from hypercorn.typing import Framework

    _answer_unparsable_requests_with_problems()
    _let_go_of_stalled_readers()

    config = HypercornConfig()
    config.bind = [bind]
    config.accesslog = None  # requests carry tokens; there is no access log to leak them into
    config.errorlog = logging.getLogger("hypercorn.error")  # through the host's logging set-up
    config.graceful_timeout = graceful_timeout
    config.include_server_header = False
    service: Service = app.state.service

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        _log.info("shutting down")
        service.begin_shutdown()

    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            partial(hypercorn_serve, cast(Framework, app), config, shutdown_trigger=trigger)
        )
        # Hypercorn binds and reports even when the lifespan failed (it raises just after):
        # only a service whose runner is up is announced.
        if service.runner_ is not None:
            if freeze_heap:
                gc.collect()
                gc.freeze()
            task_status.started(urls)


#: What Hypercorn's own answers to a request it cannot parse say, by status.
_UNPARSABLE = {
    431: (
        "headers-too-large",
        "Request header fields too large",
        "the request's headers are too large; send smaller ones",
    ),
    400: ("malformed-request", "Bad request", "the request is not valid HTTP/1.1"),
}


def _answer_unparsable_requests_with_problems() -> None:
    """Make Hypercorn's own 400 and 431 answers problem documents with the API's headers.

    A request h11 cannot parse (a malformed request line, headers past the size limit) never
    reaches the application: Hypercorn answers it itself, with an empty body and none of the
    security headers every other answer carries. Hypercorn has no setting for that answer, so
    the HTTP/1.1 protocol class it builds connections with is swapped for a subclass that
    sends the problem instead. Idempotent.
    """
    import h11
    from hypercorn import protocol
    from hypercorn.protocol.h11 import H11Protocol

    names = vars(protocol)  # the module's globals: ProtocolWrapper looks the class up there
    if names["H11Protocol"] is not H11Protocol:
        return  # already swapped

    class ProblemH11Protocol(H11Protocol):
        async def _send_error_response(self, status_code: int) -> None:
            kind, title, detail = _UNPARSABLE.get(status_code, _UNPARSABLE[400])
            answer = Problem(status_code, kind, title, detail).response()
            headers = [
                *answer.raw_headers,  # content-type, content-length and the security headers
                (b"connection", b"close"),
                *self.config.response_headers("h11"),
            ]
            await self._send_h11_event(h11.Response(status_code=status_code, headers=headers))
            await self._send_h11_event(h11.Data(data=bytes(answer.body)))
            await self._send_h11_event(h11.EndOfMessage())

    names["H11Protocol"] = ProblemH11Protocol


def _let_go_of_stalled_readers() -> None:
    """Make Hypercorn close a connection whose write makes no progress for
    :data:`SEND_TIMEOUT` seconds.

    Hypercorn writes each chunk shielded and without a deadline: a client that stopped
    reading (an event stream left open, an export never drained) held the request's task, its
    job watch and the socket for as long as it stayed connected, and no cancel could end it.
    Hypercorn has no setting for it, so the connection class its listeners make is swapped
    for a subclass whose writes have a deadline. Idempotent.
    """
    from hypercorn.events import Closed, Event, RawData
    from hypercorn.trio import run
    from hypercorn.trio.tcp_server import TCPServer

    names = vars(run)  # the module's globals: its listeners make connections of this class
    if names["TCPServer"] is not TCPServer:
        return  # already swapped

    class DeadlinedTCPServer(TCPServer):
        async def protocol_send(self, event: Event) -> None:
            if not isinstance(event, RawData):
                await super().protocol_send(event)
                return
            async with self.send_lock:
                try:
                    # Shielded as Hypercorn's own write (a cancel mid-chunk would corrupt the
                    # response); the deadline inside still ends a write nobody takes.
                    with trio.CancelScope(shield=True), trio.move_on_after(SEND_TIMEOUT) as cut:
                        await self.stream.send_all(event.data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    await self.protocol.handle(Closed())
                    return
            if cut.cancelled_caught:
                _log.info("closing a connection whose client stopped reading")
                with trio.CancelScope(shield=True):  # bounded: a close waits on nothing
                    await self.stream.aclose()
                    await self.protocol.handle(Closed())

    names["TCPServer"] = DeadlinedTCPServer
