"""The service's handlers: one function a route, each reading the :class:`Service` its
application holds (``app.state.service``)."""

from __future__ import annotations

import trio
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_CONTENT_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .._errors import BatchError
from .._text import parse_count
from ..fetchers import HttpFetcher
from ..fetchers._recording import Recording, check_replays
from ._batch_data import FILTER_KEYS, filter_from_query, filter_query
from ._bodies import (
    created,
    job_json,
    page_json,
    parse_json,
    parse_page,
    parse_submission,
    read_body,
    require_json,
    target_json_chunks,
    target_summary_json,
)
from ._events import EventStream
from ._problems import Problem, not_found, problem_for
from ._service import Service
from ._snapshots import snapshots_of
from ._webhooks import delivery_json, parse_webhook

__all__ = [
    "batch_resource",
    "batches",
    "cancel_batch",
    "events",
    "get_target",
    "healthz",
    "metrics",
    "openapi_json",
]


async def submit(request: Request) -> Response:
    """POST /v1/batches: submit a job; 201 for a new one, 200 for the same batch reused."""
    service = Service.of(request)
    caller = service.caller(request)
    require_json(request)
    body = await read_body(request, service.max_body, seconds=service.body_timeout)
    obj = parse_json(body)
    try:
        caller_class, targets, metadata = parse_submission(obj, caller, service.config)
        assert isinstance(obj, dict)  # parse_submission refuses anything else
        webhook = parse_webhook(obj)
        runner = service.runner
        targets = Recording.from_json(obj).apply(targets)
        snaps = snapshots_of(service.fetch)
        await check_replays(snaps, runner.store, caller.name, targets, now=service.now())
        with service.tracing.remote_parent(request.headers):  # the job links to its trace
            job_id, reused = await runner.submit(
                caller.name, caller_class, targets, metadata=metadata, webhook=webhook
            )
    except BatchError as exc:
        raise problem_for(exc, retry_after=service.retry_after) from None
    return await created(runner, job_id, reused)


async def list_batches(request: Request) -> Response:
    """GET /v1/batches: the caller's jobs, newest first, a page at a time."""
    service = Service.of(request)
    caller = service.caller(request)
    limit, before = parse_page(request.query_params, FILTER_KEYS)  # InvalidRequest: 422
    where = filter_from_query(request.query_params)
    jobs = await service.runner.store.list_caller_jobs(
        caller.name, now=service.now(), limit=limit, before=before, where=where
    )
    return JSONResponse(page_json(jobs, limit, filter_query(where)))


async def batches(request: Request) -> Response:
    """/v1/batches: list (GET) or submit (POST)."""
    if request.method == "POST":
        return await submit(request)
    return await list_batches(request)


async def get_batch(request: Request) -> Response:
    """GET /v1/batches/{id}: the job, its counts and its targets' summaries."""
    service = Service.of(request)
    caller = service.caller(request)
    # Whose job it is is known before its targets are read: another caller's job answers as
    # fast as an unknown id, and never costs a read of its targets.
    owned = await service.owned_job(request, caller)
    found = await service.runner.overview(owned.id)
    if found is None:
        raise not_found()
    job, targets, sizes = found
    service.owned(job, caller)
    summaries = [target_summary_json(job.id, t, n) for t, n in zip(targets, sizes, strict=True)]
    webhook = await delivery_json(service, job.id)
    return JSONResponse({**job_json(job, targets), "webhook": webhook, "targets": summaries})


async def get_target(request: Request) -> Response:
    """GET /v1/batches/{id}/targets/{idx}: one target with its whole result."""
    service = Service.of(request)
    caller = service.caller(request)
    idx = parse_count(request.path_params["idx"], max_digits=9)
    missing = "no such job or target"
    # The owner first: another caller's job never has its (maybe big) result read.
    service.owned(
        await service.runner.store.get_job(request.path_params["id"], now=service.now()),
        caller,
        missing,
    )
    found = None if idx is None else await service.runner.target(request.path_params["id"], idx)
    job, target = (None, None) if found is None else found
    service.owned(job, caller, missing)
    assert target is not None  # found, since owned() accepted its job
    # In pieces, each made on a worker thread: a big result encoded whole on the event loop
    # stalled every other request for seconds, and held several copies of itself.
    return StreamingResponse(target_json_chunks(target), media_type="application/json")


async def cancel_batch(request: Request) -> Response:
    """POST /v1/batches/{id}/cancel: cancel a live job; 409 once it has finished."""
    service = Service.of(request)
    caller = service.caller(request)
    require_json(request, body_expected=False)
    job = await service.owned_job(request, caller)
    conflict = Problem(
        409, "already-finished", "Conflict", f"the job has already finished ({job.status})"
    )
    if job.is_terminal:
        raise conflict
    if not await service.runner.cancel(job.id):
        raise conflict  # it finished meanwhile
    found = await service.runner.overview(job.id)  # statuses only, as a submit's answer
    if found is None:
        raise not_found()
    return JSONResponse(job_json(found[0], found[1]))


async def forget_batch(request: Request) -> Response:
    """DELETE /v1/batches/{id}: forget a finished job and its results; 204."""
    service = Service.of(request)
    caller = service.caller(request)
    job = await service.runner.forget(request.path_params["id"], caller=caller.name)
    if job is None:
        raise not_found()  # another caller's job reads exactly like an unknown one
    return Response(status_code=204)


async def batch_resource(request: Request) -> Response:
    """/v1/batches/{id}: read (GET) or forget (DELETE)."""
    if request.method == "DELETE":
        return await forget_batch(request)
    return await get_batch(request)


async def events(request: Request) -> Response:
    """GET /v1/batches/{id}/events: Server-Sent Events, one per stored outcome."""
    service = Service.of(request)
    caller = service.caller(request)
    job = await service.owned_job(request, caller)
    last = parse_count(request.headers.get("last-event-id", "").strip(), max_digits=9)
    after = -1 if last is None else last
    return EventStream(service, service.runner, job.id, after)


async def healthz(request: Request) -> Response:
    """GET /healthz: 200 while the runner is up, 503 while it shuts down."""
    Service.of(request).runner  # noqa: B018 - raises RunnerClosed (503) while shutting down
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    """GET /metrics: Prometheus text, with the store's counts; OpenMetrics (which shows the
    exemplars' trace ids) when the scraper's Accept header asks for it."""
    service = Service.of(request)
    runner = service.runner_
    if runner is not None:
        counts = await runner.store.counts(now=service.now())
        service.metrics.set_store_counts(counts)
    if isinstance(service.fetch, HttpFetcher):
        if service.host_metrics:
            # Opt-in: /metrics takes no credentials, and these name every host callers fetch.
            service.metrics.set_host_figures(service.fetch.host_figures())
        service.metrics.set_snapshot_counts(service.fetch.snapshot_counts)
    if "application/openmetrics-text" in request.headers.get("accept", ""):
        text = await trio.to_thread.run_sync(openmetrics_latest, service.metrics.registry)
        return Response(text, media_type=OPENMETRICS_CONTENT_TYPE)
    text = await trio.to_thread.run_sync(generate_latest, service.metrics.registry)
    return Response(text, media_type=CONTENT_TYPE_PLAIN_0_0_4)


async def openapi_json(request: Request) -> Response:
    """GET /openapi.json: the OpenAPI document."""
    return JSONResponse(request.app.state.openapi)
