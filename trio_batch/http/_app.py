"""The application: :func:`create_app` builds the service: its routes (the handlers are in
``_routes``), error handlers and lifespan."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import cast

import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._config import Config
from .._errors import BatchError
from .._text import MAX_SECONDS, check_seconds, check_whole
from .._tracing import NO_TRACING, Tracing
from ..runner import FetchFunc, WebhookDeliverer, open_runner
from ..store import JobStore, open_store
from ._auth import HeaderAuth, TokenAuth
from ._batch_data import batch_data_routes
from ._dashboard import dashboard_routes
from ._headers import SecurityHeaders
from ._metrics import Metered, RequestCounter
from ._openapi import openapi_document
from ._problems import Problem, problem_for, problem_for_http
from ._routes import (
    batch_resource,
    batches,
    cancel_batch,
    events,
    get_target,
    healthz,
    metrics,
    openapi_json,
)
from ._service import Service
from ._snapshots import collect_periodically, snapshot_routes, snapshots_of
from ._webhooks import webhook_routes

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
    tracing: Tracing = NO_TRACING,
    listen_db: str | None = None,
    webhooks: WebhookDeliverer | None = None,
    host_metrics: bool = False,
) -> Starlette:
    """Build the service as a Starlette application; serve it with :func:`serve`.

    The application's lifespan opens the store at ``db`` and a runner with ``fetch`` and
    ``config`` (see :func:`trio_batch.open_runner`); it must run under trio. ``auth`` decides
    who a request comes from. ``max_body`` caps a request body (bytes) and ``body_timeout`` the
    seconds it may take to arrive (408 past it), ``retry_after`` is the
    ``Retry-After`` sent with 429 and 503, ``heartbeat`` the seconds between keep-alive
    comments on an idle event stream. ``now``, ``logger`` and ``tracing`` go to the runner; a
    job submitted with a W3C ``traceparent`` header links to that trace. For a
    PostgreSQL ``db``, ``config.store_timeout`` bounds each store call and ``listen_db`` is a
    direct URL for LISTEN beside a pooled ``db`` (see :func:`~trio_batch.open_store`).
    ``webhooks`` (a :class:`~trio_batch.fetchers.WebhookSender`) sends the terminal events of
    jobs submitted with a ``"webhook"``; without it such a submit is refused (422).
    ``host_metrics``: ``/metrics``, which answers without credentials, reports the built-in
    fetcher's figures per host, naming every host callers fetch; off by default.

    ``app.state.service.begin_shutdown()`` refuses new jobs and ends event streams; :func:`serve`
    calls it when its shutdown trigger fires.
    """
    # Each is used per request: a NaN max_body let any body in, a body_timeout or heartbeat
    # of 10**400 failed every submit or event stream with a 500, an infinite one never cut a
    # trickled body, a retry_after of True was sent as "Retry-After: True".
    check_whole("max_body", max_body, low=1)
    check_seconds("body_timeout", body_timeout, zero=False)
    check_seconds("heartbeat", heartbeat, zero=False)
    check_whole("retry_after", retry_after, high=MAX_SECONDS)
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
        tracing=tracing,
        host_metrics=host_metrics,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service.stopping = trio.Event()
        async with (
            _opened_store(service.db, service.config.store_timeout, listen_db) as store,
            open_runner(
                store,
                service.fetch,
                service.config,
                now=service.now,
                logger=service.logger,
                on_store_write=service.metrics.observe_write,
                tracing=Metered(service.tracing, service.metrics),
                webhooks=webhooks,
            ) as runner,
        ):
            service.runner_ = runner
            async with trio.open_nursery() as nursery:
                snaps = snapshots_of(service.fetch)
                if snaps is not None:
                    interval = service.config.purge_interval
                    nursery.start_soon(collect_periodically, snaps, store, service.now, interval)
                try:
                    yield
                finally:
                    service.stopping.set()
                    service.runner_ = None
                    nursery.cancel_scope.cancel()

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
            *batch_data_routes(),
            *webhook_routes(),
            *snapshot_routes(),
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
    app.state.openapi = openapi_document(
        auth_header=auth.header if isinstance(auth, HeaderAuth) else None
    )
    return app


@contextlib.asynccontextmanager
async def _opened_store(
    target: str, store_timeout: float, listen_url: str | None
) -> AsyncIterator[JobStore]:
    """The store ``target`` names (see :func:`~trio_batch.open_store`): the service's one way in.

    Opened on a worker thread (connecting and migrating block); the close is shielded, so a
    cancelled lifespan still closes the store.
    """
    store = await trio.to_thread.run_sync(
        functools.partial(open_store, target, store_timeout=store_timeout, listen_url=listen_url)
    )
    try:
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
