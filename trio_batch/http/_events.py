"""``GET /v1/batches/{id}/events``: a job's outcomes as Server-Sent Events.

A result of more than :data:`INLINE_RESULT` characters (its JSON) is not sent in the event:
the event carries ``result: null`` with the result's ``result_size`` and the ``result_url`` to
read it from, as the job view does. Such a result is not even read from the store: a stream
of 50 MB results would otherwise load each one to send every watcher a link.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .._model import Job, Result, TargetStatus
from ..runner import Runner
from ._bodies import job_json, target_summary_json
from ._service import Service

__all__ = ["INLINE_RESULT", "EventStream"]

#: Largest result (characters of its JSON, content and meta) sent inside a ``target`` event.
INLINE_RESULT = 64 * 1024
#: A result this small, with a meta of a few scalars, is encoded on the loop without a look.
_CHEAP_CONTENT = 4096
_CHEAP_META_ITEMS = 16


def _cheap(result: Result) -> bool:
    meta = result.meta
    return (
        len(result.content) <= _CHEAP_CONTENT
        and len(meta) <= _CHEAP_META_ITEMS
        and all(
            v is None or isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) < 256)
            for v in meta.values()
        )
    )


def _target_event(job_id: str, target: TargetStatus) -> bytes:
    """The ``target`` event: the result inline, or a link to it if the store left it unread
    for being larger than :data:`INLINE_RESULT` (the watch asks for that)."""
    if target.result_size is not None:
        linked = {**target_summary_json(job_id, target, target.result_size), "result": None}
        return _sse("target", linked, str(target.idx))
    return _sse("target", target.to_json(), str(target.idx))


def _sse(event: str, data: Mapping[str, Any], event_id: str | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, ensure_ascii=True, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


class EventStream(Response):
    """A Server-Sent Events response following one job through :meth:`Runner.watch`."""

    def __init__(self, service: Service, runner: Runner, job_id: str, after: int) -> None:
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self._service = service
        self._runner = runner
        self._job_id = job_id
        self._after = after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})

        async def write(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._until_disconnect, receive, nursery.cancel_scope)
            await write(b": stream of job events\n\n")
            await self._pump(write)
            nursery.cancel_scope.cancel()
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _until_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        scope.cancel()

    async def _pump(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        service = self._service
        send_items, receive_items = trio.open_memory_channel[TargetStatus | Job](0)

        async def watch() -> None:
            async with send_items:
                async for item in self._runner.watch(self._job_id, results_up_to=INLINE_RESULT):
                    await send_items.send(item)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            nursery.start_soon(self._stop_on_shutdown, write, nursery.cancel_scope)
            async with receive_items:
                while True:
                    with trio.move_on_after(service.heartbeat) as idle:
                        try:
                            item = await receive_items.receive()
                        except trio.EndOfChannel:
                            break
                    if idle.cancelled_caught:
                        await write(b": keep-alive\n\n")
                        continue
                    if isinstance(item, Job):
                        await write(_sse("job", job_json(item)))
                    elif item.idx > self._after:
                        if item.result is None or _cheap(item.result):
                            event = _target_event(self._job_id, item)
                        else:  # encoded on a worker thread, off the event loop
                            event = await trio.to_thread.run_sync(_target_event, self._job_id, item)
                        await write(event)
            nursery.cancel_scope.cancel()

    async def _stop_on_shutdown(
        self, write: Callable[[bytes], Awaitable[None]], scope: trio.CancelScope
    ) -> None:
        await self._service.stopping.wait()
        with contextlib.suppress(OSError):
            await write(_sse("shutdown", {"detail": "the service is shutting down"}))
        scope.cancel()
