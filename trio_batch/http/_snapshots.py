"""The service's snapshots: pinning a job's snapshot, and collecting lapsed ones.

- ``POST /v1/batches/{id}/pin`` (body ``{"shared": true}`` optional): keep the caller's job's
  snapshot past its lease; ``shared`` lets any caller replay it. ``DELETE`` unpins (204).
- ``GET /v1/batches/{id}/snapshot.warc.gz``: the snapshot as a WARC/1.1 file (see
  ``fetchers._warc``), for its caller, or anyone once pinned and shared.
- The snapshots of lapsed, unpinned jobs are collected every ``Config.purge_interval``
  seconds, beside the runner's own purge (:func:`collect_periodically`).

The snapshot directory is the built-in fetcher's (``--snapshot-dir``, else ``DB.snapshots``);
a service whose fetch function has none answers 409 to a pin.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .._text import json_type
from ..fetchers import SnapshotError, SnapshotStore
from ..store import JobStore
from ._bodies import parse_json, read_body, require_json
from ._problems import Problem, not_found
from ._service import Service

__all__ = ["collect_periodically", "snapshot_routes", "snapshots_of"]

_log = logging.getLogger("trio_batch.http")


def snapshots_of(fetch: object) -> SnapshotStore | None:
    """The snapshot directory of the fetch function ``fetch``, if it has one."""
    snaps = getattr(fetch, "snapshots", None)
    return snaps if isinstance(snaps, SnapshotStore) else None


async def collect_periodically(
    snaps: SnapshotStore,
    store: JobStore,
    now: Callable[[], float],
    interval: float,
    on_round: Callable[[int, int], None] | None = None,
) -> None:
    """Every ``interval`` seconds, delete the snapshots of lapsed, unpinned jobs and the
    bodies nothing names; ``on_round`` is told what each round deleted. A failure is logged
    and tried again next time. Cancellation: stops between jobs (see
    :meth:`SnapshotStore.collect`)."""

    async def alive(job_id: str) -> bool:
        return await store.get_job(job_id, now=now()) is not None

    while True:
        await trio.sleep(interval)
        try:
            removed, bodies = await snaps.collect(alive)
        except Exception as exc:  # a disk or store error: the next round tries again
            _log.warning("collecting snapshots failed: %s", exc)
            continue
        if removed or bodies:
            _log.info("collected %d snapshot(s) and %d unused body file(s)", removed, bodies)
        if on_round is not None:
            on_round(removed, bodies)


async def pin(request: Request) -> Response:
    """POST /v1/batches/{id}/pin: pin the caller's job's snapshot; DELETE: unpin it."""
    service = Service.of(request)
    caller = service.caller(request)
    pinning = request.method == "POST"
    shared = False
    # Whether there is a body is what arrives: a chunked one has no Content-Length (and was
    # dropped), and "Content-Length: 00" is no body (and was refused as one).
    body = b""
    if pinning:
        require_json(request, body_expected=False)
        body = await read_body(request, service.max_body, seconds=service.body_timeout)
    if body:
        require_json(request)
        obj = parse_json(body)
        shared_value = obj.get("shared", False) if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or set(obj) - {"shared"} or not isinstance(shared_value, bool):
            raise Problem(
                422,
                "invalid-request",
                "Invalid request",
                f'the body is {{"shared": true|false}} or empty, not {json_type(obj)} of that',
            )
        shared = shared_value
    snaps = snapshots_of(service.fetch)
    job = await service.owned_job(request, caller)
    if snaps is None:
        raise Problem(409, "no-snapshots", "Conflict", "this service keeps no snapshots")
    owner = await trio.to_thread.run_sync(snaps.owner_sync, job.id)
    if owner is None:
        raise not_found('the job has no snapshot: submit it with "snapshot": true')
    await trio.to_thread.run_sync(lambda: snaps.set_pin(job.id, pinned=pinning, shared=shared))
    if not pinning:
        return Response(status_code=204)
    return JSONResponse({"job": job.id, "pinned": True, "shared": shared})


async def snapshot_warc(request: Request) -> Response:
    """GET /v1/batches/{id}/snapshot.warc.gz: the job's snapshot as WARC/1.1, streamed a
    record at a time (each made on a worker thread from its body file)."""
    service = Service.of(request)
    caller = service.caller(request)
    job_id = request.path_params["id"]
    snaps = snapshots_of(service.fetch)
    owner = None if snaps is None else await trio.to_thread.run_sync(snaps.owner_sync, job_id)
    if snaps is None or owner is None or not owner.readable_by(caller.name):
        raise not_found("no such job, or it has no snapshot")
    if not owner.pinned:  # its snapshot lives as long as its job
        service.owned(await service.runner.store.get_job(job_id, now=service.now()), caller)
    from ..fetchers._warc import warc_records  # warcio itself only when a record is made

    try:
        import warcio  # noqa: F401
    except ImportError:
        raise Problem(
            501, "no-warc", "Not implemented", "the service needs the warc extra for WARC files"
        ) from None
    try:
        records = await trio.to_thread.run_sync(warc_records, snaps, job_id)
    except SnapshotError as exc:
        detail = f"{exc}; {exc.hint}"
        raise Problem(500, "snapshot-damaged", "Snapshot damaged", detail) from None

    async def chunks() -> AsyncIterator[bytes]:
        while True:
            chunk = await trio.to_thread.run_sync(next, records, None)
            if chunk is None:
                return
            yield chunk

    return StreamingResponse(
        chunks(),
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{job_id}.warc.gz"'},
    )


def snapshot_routes() -> list[Route]:
    """The routes of this module, for the application's table."""
    return [
        Route("/v1/batches/{id}/pin", pin, methods=["POST", "DELETE"]),
        Route("/v1/batches/{id}/snapshot.warc.gz", snapshot_warc, methods=["GET"]),
    ]
