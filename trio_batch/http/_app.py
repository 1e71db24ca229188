"""The application: :func:`create_app` builds the service's routes, handlers and lifespan."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import cast

import trio
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._config import Config
from .._errors import BatchError
from .._text import parse_count
from ..runner import FetchFunc, open_runner
from ..store import JobStore, open_store
from ._auth import HeaderAuth, TokenAuth
from ._bodies import (
    job_json,
    page_json,
    parse_json,
    parse_page,
    parse_submission,
    read_body,
    require_json,
    target_summary_json,
)
from ._dashboard import dashboard_routes
from ._events import EventStream
from ._headers import SecurityHeaders
from ._metrics import RequestCounter
from ._openapi import openapi_document
from ._problems import Problem, not_found, problem_for, problem_for_http
from ._service import Service

__all__ = ["DEFAULT_BODY_TIMEOUT", "DEFAULT_MAX_BODY", "create_app"]

#: Largest request body accepted by default (bytes); past it, 413.
DEFAULT_MAX_BODY = 1024 * 1024
#: Seconds a request body may take to arrive by default; past it, 408.
DEFAULT_BODY_TIMEOUT = 10.0
_log = logging.getLogger("trio_batch.http")


def create_app(
    *,
    db: str | os.PathLike[str],
    fetch: FetchFunc,
    auth: TokenAuth | HeaderAuth,
    config: Config | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    retry_after: int = 5,
    heartbeat: float = 15.0,
    now: Callable[[], float] = time.time,
    logger: logging.Logger | None = None,
) -> Starlette:
    """Build the service as a Starlette application; serve it with :func:`serve`.

    The application's lifespan opens the store at ``db`` and a runner with ``fetch`` and
    ``config`` (see :func:`trio_batch.open_runner`); it must run under trio. ``auth`` decides
    who a request comes from. ``max_body`` caps a request body (bytes) and ``body_timeout`` the
    seconds it may take to arrive (408 past it), ``retry_after`` is the
    ``Retry-After`` sent with 429 and 503, ``heartbeat`` the seconds between keep-alive
    comments on an idle event stream. ``now`` and ``logger`` go to the runner.

    ``app.state.service.begin_shutdown()`` refuses new jobs and ends event streams; :func:`serve`
    calls it when its shutdown trigger fires.
    """
    if max_body < 1 or retry_after < 0 or not heartbeat > 0 or not body_timeout > 0:
        raise ValueError(
            "max_body, body_timeout and heartbeat must be positive, retry_after not negative"
        )
    service = Service(
        db=os.fspath(db),
        fetch=fetch,
        config=Config() if config is None else config,
        auth=auth,
        max_body=max_body,
        body_timeout=body_timeout,
        retry_after=retry_after,
        heartbeat=heartbeat,
        now=now,
        logger=logger,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service.stopping = trio.Event()
        async with (
            _opened_store(service.db) as store,
            open_runner(
                store,
                service.fetch,
                service.config,
                now=service.now,
                logger=service.logger,
                on_store_write=service.metrics.observe_write,
            ) as runner,
        ):
            service.runner_ = runner
            try:
                yield
            finally:
                service.stopping.set()
                service.runner_ = None

    async def submit(request: Request) -> Response:
        caller = service.caller(request)
        require_json(request)
        body = await read_body(request, service.max_body, seconds=service.body_timeout)
        obj = parse_json(body)
        try:
            caller_class, targets = parse_submission(obj, caller, service.config)
            runner = service.runner
            job_id, reused = await runner.submit(caller.name, caller_class, targets)
        except BatchError as exc:
            raise problem_for(exc, retry_after=service.retry_after) from None
        status = await runner.status(job_id)
        if status is None:
            raise not_found("the job lapsed as soon as it was created")
        job, stored = status
        return JSONResponse(
            {**job_json(job, stored), "reused": reused},
            status_code=200 if reused else 201,
            headers={"Location": f"/v1/batches/{job_id}"},
        )

    async def list_batches(request: Request) -> Response:
        caller = service.caller(request)
        limit, before = parse_page(request.query_params)  # InvalidRequest: 422
        jobs = await service.runner.store.list_caller_jobs(
            caller.name, now=service.now(), limit=limit, before=before
        )
        return JSONResponse(page_json(jobs, limit))

    async def batches(request: Request) -> Response:
        if request.method == "POST":
            return await submit(request)
        return await list_batches(request)

    async def get_batch(request: Request) -> Response:
        caller = service.caller(request)
        found = await service.runner.overview(request.path_params["id"])
        if found is None:
            raise not_found()
        job, targets, sizes = found
        service.owned(job, caller)
        summaries = [target_summary_json(job.id, t, n) for t, n in zip(targets, sizes, strict=True)]
        return JSONResponse({**job_json(job, targets), "targets": summaries})

    async def get_target(request: Request) -> Response:
        caller = service.caller(request)
        idx = parse_count(request.path_params["idx"], max_digits=9)
        found = None if idx is None else await service.runner.target(request.path_params["id"], idx)
        missing = "no such job or target"
        job, target = (None, None) if found is None else found
        service.owned(job, caller, missing)
        assert target is not None  # found, since owned() accepted its job
        return JSONResponse(target.to_json())

    async def cancel_batch(request: Request) -> Response:
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
        status = await service.runner.status(job.id)
        if status is None:
            raise not_found()
        return JSONResponse(job_json(*status))

    async def forget_batch(request: Request) -> Response:
        caller = service.caller(request)
        job = await service.runner.forget(request.path_params["id"], caller=caller.name)
        if job is None:
            raise not_found()  # another caller's job reads exactly like an unknown one
        return Response(status_code=204)

    async def batch_resource(request: Request) -> Response:
        if request.method == "DELETE":
            return await forget_batch(request)
        return await get_batch(request)

    async def events(request: Request) -> Response:
        caller = service.caller(request)
        job = await service.owned_job(request, caller)
        last = parse_count(request.headers.get("last-event-id", "").strip(), max_digits=9)
        after = -1 if last is None else last
        return EventStream(service, service.runner, job.id, after)

    async def healthz(request: Request) -> Response:
        service.runner  # noqa: B018 - raises RunnerClosed (503) while shutting down
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        runner = service.runner_
        if runner is not None:
            counts = await runner.store.counts(now=service.now())
            service.metrics.set_store_counts(counts)
        text = await trio.to_thread.run_sync(generate_latest, service.metrics.registry)
        return Response(text, media_type=CONTENT_TYPE_PLAIN_0_0_4)

    openapi = openapi_document(auth_header=auth.header if isinstance(auth, HeaderAuth) else None)

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(openapi)

    async def on_problem(request: Request, exc: Exception) -> Response:
        return cast(Problem, exc).response()

    async def on_batch_error(request: Request, exc: Exception) -> Response:
        return problem_for(cast(BatchError, exc), retry_after=service.retry_after).response()

    async def on_http_exception(request: Request, exc: Exception) -> Response:
        return problem_for_http(cast(HTTPException, exc)).response()

    async def on_server_error(request: Request, exc: Exception) -> Response:
        _log.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
        return Problem(
            500, "internal-error", "Internal server error", "the service failed; see its log"
        ).response()

    app = Starlette(
        routes=[
            Route("/v1/batches", batches, methods=["GET", "POST"]),
            # One route per path, so a 405 lists every allowed method.
            Route("/v1/batches/{id}", batch_resource, methods=["GET", "DELETE"]),
            Route("/v1/batches/{id}/targets/{idx}", get_target, methods=["GET"]),
            Route("/v1/batches/{id}/cancel", cancel_batch, methods=["POST"]),
            Route("/v1/batches/{id}/events", events, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/openapi.json", openapi_json, methods=["GET"]),
            *dashboard_routes(),
        ],
        exception_handlers={
            Problem: on_problem,
            BatchError: on_batch_error,
            HTTPException: on_http_exception,
            Exception: on_server_error,
        },
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(RequestCounter, metrics=service.metrics),
        ],
        lifespan=lifespan,
    )
    # Starlette would answer /metrics/ with a redirect whose Location it builds from the Host
    # header (Host: evil.test gives http://evil.test/metrics), unauthenticated: no redirects
    # built from request headers, so a path with a trailing slash is simply not found.
    app.router.redirect_slashes = False
    app.state.service = service
    return app


@contextlib.asynccontextmanager
async def _opened_store(target: str) -> AsyncIterator[JobStore]:
    """The store ``target`` names (see :func:`~trio_batch.open_store`): the service's one way in.

    Opened on a worker thread (connecting and migrating block); the close is shielded, so a
    cancelled lifespan still closes the store.
    """
    store = await trio.to_thread.run_sync(open_store, target)
    try:
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
