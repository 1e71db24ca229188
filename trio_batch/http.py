"""The HTTP service: ``trio-batch serve``, a JSON API over the runner.

A Starlette application (ASGI; it runs on trio through anyio) served by Hypercorn's trio
worker. The runner lives in the application's lifespan: it opens when the server starts and,
when the server stops, every job still live is marked ``failed`` with error ``"shutdown"``.
Needs the ``http`` extra (``pip install 'trio-batch[http]'``).

Endpoints (see ``GET /openapi.json`` for the full description):

- ``POST /v1/batches`` submits ``{"targets": [...], "caller_class"?: ...}``: ``201`` for a new
  job, ``200`` for the same batch submitted again within its lease.
- ``GET /v1/batches/{id}``: the job, its counts per target status, its targets and results.
- ``POST /v1/batches/{id}/cancel``: cancel a live job (``409`` once it has finished).
- ``GET /v1/batches/{id}/events``: Server-Sent Events, one per target outcome as it is stored,
  then the terminal job.
- ``GET /healthz``, ``GET /metrics`` (Prometheus text format), ``GET /openapi.json``.

Errors are RFC 9457 problem documents (``application/problem+json``). Callers authenticate with
``Authorization: Bearer <token>`` (:class:`TokenAuth`), or, behind a trusted gateway, with a
header naming the caller (:class:`HeaderAuth`); a caller only ever sees its own jobs.

Build an application in-process with :func:`create_app` and serve it with :func:`serve`; the
command line is :func:`serve_main` (``python -m trio_batch.http --help``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import trio
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ._model import (
    BatchError,
    Busy,
    CallerBusy,
    Config,
    InvalidRequest,
    InvalidTargets,
    Job,
    JobState,
    RunnerClosed,
    Target,
    TargetState,
    TargetStatus,
    TooManyTargets,
    check_caller,
    unknown_keys,
)
from ._openapi import openapi_document
from ._runner import FetchFunc, Runner, open_runner
from ._store import Store
from .fetchers import DestinationPolicy, DestinationRefused, builtin_fetch, load_fetch

__all__ = [
    "DEFAULT_CALLER_CLASS",
    "Caller",
    "DestinationPolicy",
    "DestinationRefused",
    "HeaderAuth",
    "TokenAuth",
    "add_serve_arguments",
    "create_app",
    "run_serve",
    "serve",
    "serve_main",
]

#: The caller class of a caller whose credentials name none.
DEFAULT_CALLER_CLASS = "default"
#: Largest request body accepted by default (bytes); past it, 413.
DEFAULT_MAX_BODY = 1024 * 1024
#: Shortest bearer token a tokens file may hold.
MIN_TOKEN_LENGTH = 16

PROBLEM_JSON = "application/problem+json"
_log = logging.getLogger("trio_batch.http")


# --------------------------------------------------------------------------------------------
# Identity


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a request: the caller name jobs are owned by, and its caller class."""

    name: str
    caller_class: str = DEFAULT_CALLER_CLASS


class TokenAuth:
    """Bearer-token authentication: each token maps to a :class:`Caller`.

    Tokens are kept only as SHA-256 digests and compared with :func:`hmac.compare_digest`
    against every known token (no early exit), so timing does not tell how much of a guess was
    right. Tokens are never logged or echoed in errors.
    """

    def __init__(self, tokens: Mapping[str, Caller]) -> None:
        if not tokens:
            raise ValueError("TokenAuth needs at least one token")
        self._entries = [(_digest(token), caller) for token, caller in tokens.items()]

    def __repr__(self) -> str:
        return f"TokenAuth(<{len(self._entries)} tokens>)"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TokenAuth:
        """Read a tokens file: one ``TOKEN CALLER [CLASS]`` per line, ``#`` starts a comment.

        Tokens must be at least ``MIN_TOKEN_LENGTH`` characters and distinct (generate one with
        ``python -c 'import secrets; print(secrets.token_urlsafe(32))'``). Raises ValueError
        naming the line, never the token, for a malformed file.
        """
        tokens: dict[str, Caller] = {}
        with open(path, encoding="utf-8") as f:
            for lineno, raw in enumerate(f, 1):
                line = raw.split("#", 1)[0].strip()
                if not line:
                    continue
                fields = line.split()
                where = f"{os.fspath(path)} line {lineno}"
                if len(fields) not in (2, 3):
                    raise ValueError(f"{where}: expected 'TOKEN CALLER [CLASS]'")
                token, name = fields[0], fields[1]
                klass = fields[2] if len(fields) == 3 else DEFAULT_CALLER_CLASS
                if len(token) < MIN_TOKEN_LENGTH:
                    raise ValueError(
                        f"{where}: the token is shorter than {MIN_TOKEN_LENGTH} characters"
                    )
                if token in tokens:
                    raise ValueError(f"{where}: the token repeats an earlier line's")
                try:
                    tokens[token] = Caller(check_caller(name), check_caller(klass, "caller class"))
                except InvalidRequest as exc:
                    raise ValueError(f"{where}: {exc}") from None
        if not tokens:
            raise ValueError(f"{os.fspath(path)} holds no token")
        return cls(tokens)

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller a request's ``Authorization: Bearer`` header names, or None."""
        scheme, _, token = headers.get("authorization", "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        digest = _digest(token)
        found: Caller | None = None
        for known, caller in self._entries:
            if hmac.compare_digest(digest, known):
                found = caller
        return found

    @property
    def challenge(self) -> str:
        """The ``WWW-Authenticate`` value sent with a 401."""
        return 'Bearer realm="trio-batch"'


class HeaderAuth:
    """Caller identity from a request header set by a trusted gateway in front of the service.

    Only safe when nothing but the gateway can reach the service (bind it to loopback or a
    private interface): the service believes the header as it is. The caller class is the one
    the request body names, or ``DEFAULT_CALLER_CLASS``.
    """

    def __init__(self, header: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", header):
            raise ValueError(f"{header!r} is not a valid header name")
        self.header = header.lower()

    def __repr__(self) -> str:
        return f"HeaderAuth({self.header!r})"

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller the header names, or None if it is missing or not a valid caller name."""
        value = headers.get(self.header)
        if value is None:
            return None
        try:
            return Caller(check_caller(value.strip()), "")
        except InvalidRequest:
            return None

    @property
    def challenge(self) -> str:
        """The ``WWW-Authenticate`` value sent with a 401."""
        return f'Header realm="trio-batch", header="{self.header}"'


Auth = TokenAuth | HeaderAuth


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


# --------------------------------------------------------------------------------------------
# Metrics


class _Metrics:
    """The service's Prometheus metrics, in a registry of its own (not the global one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.write_seconds = Histogram(
            "trio_batch_store_write_seconds",
            "Time the runner waited for a store write: a job's creation, or one commit of the "
            "target outcomes ready at the same moment.",
            ["operation"],
            registry=self.registry,
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5),
        )
        for operation in ("create_job", "record_outcomes"):
            self.write_seconds.labels(operation)
        self.requests = Counter(
            "trio_batch_http_requests",
            "HTTP requests answered, by route and status code.",
            ["route", "code"],
            registry=self.registry,
        )

    def observe_write(self, operation: str, seconds: float) -> None:
        self.write_seconds.labels(operation).observe(seconds)


class _StoreCollector(Collector):
    """Jobs and targets by status, read from the store at scrape time (on a worker thread).

    Both count what the store holds within the retention window (unexpired jobs), whichever
    process wrote it, so they are gauges, not counters.
    """

    def __init__(self, service: _Service) -> None:
        self._service = service

    def describe(self) -> list[Metric]:
        return [
            GaugeMetricFamily("trio_batch_jobs", "Unexpired jobs by status."),
            GaugeMetricFamily("trio_batch_targets", "Targets of unexpired jobs by status."),
        ]

    def collect(self) -> list[Metric]:
        store = self._service.read_store
        if store is None:
            return []
        now = self._service.now()
        jobs = dict.fromkeys((str(s) for s in JobState), 0)
        for status, count in store.db.execute(
            "SELECT status, count(*) FROM jobs WHERE expires_at > ? GROUP BY status", (now,)
        ).fetchall():
            jobs[str(status)] = int(count)
        total, done, failed = store.db.execute(
            "SELECT coalesce(sum(targets_total), 0), coalesce(sum(targets_done), 0), "
            "coalesce(sum(targets_failed), 0) FROM jobs WHERE expires_at > ?",
            (now,),
        ).fetchone()
        job_gauge = GaugeMetricFamily(
            "trio_batch_jobs", "Unexpired jobs by status.", labels=["status"]
        )
        for status, count in jobs.items():
            job_gauge.add_metric([status], count)
        target_gauge = GaugeMetricFamily(
            "trio_batch_targets",
            "Targets of unexpired jobs: done, failed, or not finished (pending or running).",
            labels=["status"],
        )
        target_gauge.add_metric(["done"], done - failed)
        target_gauge.add_metric(["failed"], failed)
        target_gauge.add_metric(["unfinished"], total - done)
        return [job_gauge, target_gauge]


# --------------------------------------------------------------------------------------------
# Problems (RFC 9457)


class _Problem(Exception):
    """Raised by a handler to answer with a problem document."""

    def __init__(
        self,
        status: int,
        kind: str,
        title: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.title = title
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = extra

    def response(self) -> Response:
        body = {
            "type": f"urn:trio-batch:problem:{self.kind}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            **self.extra,
        }
        return JSONResponse(
            body, status_code=self.status, headers=self.headers, media_type=PROBLEM_JSON
        )


_TITLES: dict[type[BatchError], tuple[str, str]] = {
    InvalidTargets: ("invalid-targets", "Invalid targets"),
    TooManyTargets: ("too-many-targets", "Too many targets"),
    InvalidRequest: ("invalid-request", "Invalid request"),
    CallerBusy: ("caller-busy", "Caller busy"),
    Busy: ("busy", "Service busy"),
    RunnerClosed: ("shutting-down", "Shutting down"),
}


def _not_found(what: str = "no such job") -> _Problem:
    return _Problem(404, "not-found", "Not found", what)


# --------------------------------------------------------------------------------------------
# The application


@dataclass(eq=False)
class _Service:
    """Everything the handlers share; the runner and store exist while the lifespan runs."""

    db: str
    fetch: FetchFunc
    config: Config
    auth: Auth
    max_body: int
    retry_after: int
    heartbeat: float
    now: Callable[[], float]
    logger: logging.Logger | None
    metrics: _Metrics = field(default_factory=_Metrics)
    read_store: Store | None = None  # a connection of its own, for metrics
    runner_: Runner | None = None
    stopping: trio.Event = field(default_factory=trio.Event)

    @property
    def runner(self) -> Runner:
        if self.runner_ is None or self.stopping.is_set():
            raise RunnerClosed("the service is shutting down")
        return self.runner_

    def begin_shutdown(self) -> None:
        """Refuse new jobs and end event streams; the lifespan then shuts the runner down."""
        self.stopping.set()

    # ----------------------------------------------------------------------------------------

    def problem_for(self, exc: BatchError) -> _Problem:
        kind, title = next(
            (v for k, v in _TITLES.items() if isinstance(exc, k)),
            ("store-unavailable" if exc.http_status == 503 else "error", "Service error"),
        )
        status = exc.http_status
        headers = {"Retry-After": str(self.retry_after)} if status in (429, 503) else {}
        extra: dict[str, Any] = {}
        if isinstance(exc, InvalidTargets) and exc.index is not None:
            extra["index"] = exc.index
        detail = str(exc)
        if status >= 500 and not isinstance(exc, RunnerClosed):
            _log.error("store error: %s", exc)
            detail = "the job store cannot be used right now; try again later"
        return _Problem(status, kind, title, detail, headers=headers, **extra)

    def caller(self, request: Request) -> Caller:
        caller = self.auth.authenticate(request.headers)
        if caller is None:
            raise _Problem(
                401,
                "unauthorized",
                "Unauthorized",
                "missing or invalid credentials",
                headers={"WWW-Authenticate": self.auth.challenge},
            )
        return caller

    async def owned_status(
        self, request: Request, caller: Caller
    ) -> tuple[Job, list[TargetStatus]]:
        """The job in the path if it exists, has not lapsed and belongs to ``caller``."""
        job_id = request.path_params["id"]
        status = await self.runner.status(job_id)
        if status is None or status[0].caller != caller.name:
            raise _not_found()  # another caller's job reads exactly like an unknown one
        return status


def _counts(job: Job, targets: Sequence[TargetStatus] | None) -> dict[str, int]:
    counts = dict.fromkeys((str(s) for s in TargetState), 0)
    if targets is not None:
        for t in targets:
            counts[str(t.status)] += 1
        return counts
    counts["done"] = job.targets_done - job.targets_failed
    counts["failed"] = job.targets_failed
    left = job.targets_total - job.targets_done
    if job.status.is_live and left > 0:
        counts["running"], counts["pending"] = 1, left - 1
    else:
        counts["pending"] = left
    return counts


def _job_json(job: Job, targets: Sequence[TargetStatus] | None = None) -> dict[str, Any]:
    out = job.to_json()
    out["counts"] = _counts(job, targets)
    return out


def _parse_json(body: bytes) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(body, parse_constant=refuse)
    except (ValueError, RecursionError) as exc:
        raise _Problem(
            400, "malformed-json", "Malformed JSON", f"the body is not JSON: {exc}"
        ) from None


def _parse_submission(obj: object, caller: Caller, config: Config) -> tuple[str, list[Target]]:
    """The caller class and targets of a ``POST /v1/batches`` body; raises BatchError."""
    if not isinstance(obj, dict):
        raise InvalidRequest('the body must be a JSON object {"targets": [...]}')
    unknown = unknown_keys(obj, ("targets", "caller_class"))
    if unknown:
        raise InvalidRequest(
            f"unknown key(s) {unknown}; the body has 'targets' and optionally 'caller_class'"
        )
    if "targets" not in obj:
        raise InvalidRequest("the body needs 'targets', a list of {\"url\": ...} objects")
    caller_class = caller.caller_class
    if "caller_class" in obj:
        asked = check_caller(obj["caller_class"], "caller_class")
        if not caller_class:
            caller_class = asked
        elif asked != caller_class:
            raise _Problem(
                403,
                "forbidden-caller-class",
                "Forbidden",
                f"these credentials submit as caller class {caller_class!r}, not {asked!r}",
            )
    raw = obj["targets"]
    if not isinstance(raw, list):
        raise InvalidTargets("'targets' must be a JSON array of targets")
    caller_class = caller_class or DEFAULT_CALLER_CLASS
    limit, _ = config.limits_for(caller_class)
    if len(raw) > limit:  # before parsing every target of a huge list
        raise TooManyTargets(f"the job has {len(raw)} targets; the limit is {limit} per job")
    targets: list[Target] = []
    for i, item in enumerate(raw):
        try:
            targets.append(Target.from_json(item))
        except InvalidTargets as exc:
            raise InvalidTargets(f"target {i}: {exc}", index=i) from None
    return caller_class, targets


async def _read_body(request: Request, limit: int) -> bytes:
    too_large = _Problem(
        413, "body-too-large", "Content too large", f"the body is larger than {limit} bytes"
    )
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)


def _sse(event: str, data: Mapping[str, Any], event_id: str | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, ensure_ascii=True, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


class _EventStream(Response):
    """A Server-Sent Events response following one job through :meth:`Runner.watch`."""

    def __init__(self, service: _Service, runner: Runner, job_id: str, after: int) -> None:
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
                async for item in self._runner.watch(self._job_id):
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
                        await write(_sse("job", _job_json(item)))
                    elif item.idx > self._after:
                        await write(_sse("target", item.to_json(), str(item.idx)))
            nursery.cancel_scope.cancel()

    async def _stop_on_shutdown(
        self, write: Callable[[bytes], Awaitable[None]], scope: trio.CancelScope
    ) -> None:
        await self._service.stopping.wait()
        with contextlib.suppress(OSError):
            await write(_sse("shutdown", {"detail": "the service is shutting down"}))
        scope.cancel()


def create_app(
    *,
    db: str | os.PathLike[str],
    fetch: FetchFunc,
    auth: TokenAuth | HeaderAuth,
    config: Config | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    retry_after: int = 5,
    heartbeat: float = 15.0,
    now: Callable[[], float] = time.time,
    logger: logging.Logger | None = None,
) -> Starlette:
    """Build the service as a Starlette application; serve it with :func:`serve`.

    The application's lifespan opens the store at ``db`` and a runner with ``fetch`` and
    ``config`` (see :func:`trio_batch.open_runner`); it must run under trio. ``auth`` decides
    who a request comes from. ``max_body`` caps a request body (bytes), ``retry_after`` is the
    ``Retry-After`` sent with 429 and 503, ``heartbeat`` the seconds between keep-alive
    comments on an idle event stream. ``now`` and ``logger`` go to the runner.

    ``app.state.service.begin_shutdown()`` refuses new jobs and ends event streams; :func:`serve`
    calls it when its shutdown trigger fires.
    """
    if max_body < 1 or retry_after < 0 or not heartbeat > 0:
        raise ValueError("max_body and heartbeat must be positive, retry_after not negative")
    service = _Service(
        db=os.fspath(db),
        fetch=fetch,
        config=Config() if config is None else config,
        auth=auth,
        max_body=max_body,
        retry_after=retry_after,
        heartbeat=heartbeat,
        now=now,
        logger=logger,
    )
    service.metrics.registry.register(_StoreCollector(service))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service.stopping = trio.Event()
        store = await trio.to_thread.run_sync(Store.open, service.db)
        try:
            read_store = await trio.to_thread.run_sync(Store.open, service.db)
            try:
                async with open_runner(
                    store,
                    service.fetch,
                    service.config,
                    now=service.now,
                    logger=service.logger,
                    on_store_write=service.metrics.observe_write,
                ) as runner:
                    service.read_store, service.runner_ = read_store, runner
                    try:
                        yield
                    finally:
                        service.stopping.set()
                        service.runner_ = None
            finally:
                service.read_store = None
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(read_store.close)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(store.close)

    async def submit(request: Request) -> Response:
        caller = service.caller(request)
        body = await _read_body(request, service.max_body)
        obj = _parse_json(body)
        try:
            caller_class, targets = _parse_submission(obj, caller, service.config)
            runner = service.runner
            job_id, reused = await runner.submit(caller.name, caller_class, targets)
        except BatchError as exc:
            raise service.problem_for(exc) from None
        status = await runner.status(job_id)
        if status is None:
            raise _not_found("the job lapsed as soon as it was created")
        job, stored = status
        return JSONResponse(
            {**_job_json(job, stored), "reused": reused},
            status_code=200 if reused else 201,
            headers={"Location": f"/v1/batches/{job_id}"},
        )

    async def get_batch(request: Request) -> Response:
        caller = service.caller(request)
        job, targets = await service.owned_status(request, caller)
        return JSONResponse({**_job_json(job, targets), "targets": [t.to_json() for t in targets]})

    async def cancel_batch(request: Request) -> Response:
        caller = service.caller(request)
        job, _ = await service.owned_status(request, caller)
        conflict = _Problem(
            409, "already-finished", "Conflict", f"the job has already finished ({job.status})"
        )
        if job.is_terminal:
            raise conflict
        if not await service.runner.cancel(job.id):
            raise conflict  # it finished meanwhile
        status = await service.runner.status(job.id)
        if status is None:
            raise _not_found()
        return JSONResponse(_job_json(*status))

    async def events(request: Request) -> Response:
        caller = service.caller(request)
        job, _ = await service.owned_status(request, caller)
        last = request.headers.get("last-event-id", "").strip()
        after = int(last) if last.isdigit() and len(last) < 10 else -1
        return _EventStream(service, service.runner, job.id, after)

    async def healthz(request: Request) -> Response:
        service.runner  # noqa: B018 - raises RunnerClosed (503) while shutting down
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        text = await trio.to_thread.run_sync(generate_latest, service.metrics.registry)
        return Response(text, media_type=CONTENT_TYPE_PLAIN_0_0_4)

    openapi = openapi_document(auth_header=auth.header if isinstance(auth, HeaderAuth) else None)

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(openapi)

    async def on_problem(request: Request, exc: Exception) -> Response:
        return cast(_Problem, exc).response()

    async def on_batch_error(request: Request, exc: Exception) -> Response:
        return service.problem_for(cast(BatchError, exc)).response()

    async def on_http_exception(request: Request, exc: Exception) -> Response:
        http_exc = cast(HTTPException, exc)
        titles = {404: ("not-found", "Not found"), 405: ("method-not-allowed", "Not allowed")}
        kind, title = titles.get(http_exc.status_code, ("http-error", "HTTP error"))
        return _Problem(
            http_exc.status_code, kind, title, str(http_exc.detail), headers=http_exc.headers
        ).response()

    async def on_server_error(request: Request, exc: Exception) -> Response:
        _log.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
        return _Problem(
            500, "internal-error", "Internal server error", "the service failed; see its log"
        ).response()

    app = Starlette(
        routes=[
            Route("/v1/batches", submit, methods=["POST"]),
            Route("/v1/batches/{id}", get_batch, methods=["GET"]),
            Route("/v1/batches/{id}/cancel", cancel_batch, methods=["POST"]),
            Route("/v1/batches/{id}/events", events, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/openapi.json", openapi_json, methods=["GET"]),
        ],
        exception_handlers={
            _Problem: on_problem,
            BatchError: on_batch_error,
            HTTPException: on_http_exception,
            Exception: on_server_error,
        },
        middleware=[Middleware(_RequestCounter, metrics=service.metrics)],
        lifespan=lifespan,
    )
    app.state.service = service
    return app


class _RequestCounter:
    """ASGI middleware counting answered requests by route template (never raw path) and code."""

    def __init__(self, app: Any, metrics: _Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                route = getattr(scope.get("route"), "path", "unmatched")
                self.metrics.requests.labels(route, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)


# --------------------------------------------------------------------------------------------
# Serving


async def serve(
    app: Starlette,
    *,
    bind: str = "127.0.0.1:8000",
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    graceful_timeout: float = 5.0,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` (from :func:`create_app`) with Hypercorn's trio worker until shut down.

    ``bind`` is ``HOST:PORT`` (port 0 picks a free one); ``task_status.started`` receives the
    bound URLs, e.g. ``["http://127.0.0.1:50123"]``. When ``shutdown_trigger`` returns, new
    jobs are refused, event streams end, requests in progress get ``graceful_timeout`` seconds
    to finish, and the lifespan shuts the runner down (live jobs marked failed "shutdown").
    """
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.trio import serve as hypercorn_serve
    from hypercorn.typing import Framework

    config = HypercornConfig()
    config.bind = [bind]
    config.accesslog = None  # requests carry tokens; there is no access log to leak them into
    config.errorlog = logging.getLogger("hypercorn.error")  # through the host's logging set-up
    config.graceful_timeout = graceful_timeout
    config.include_server_header = False
    service: _Service = app.state.service

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        _log.info("shutting down")
        service.begin_shutdown()

    await hypercorn_serve(
        cast(Framework, app), config, shutdown_trigger=trigger, task_status=task_status
    )


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``trio-batch serve``'s options to ``parser`` (for the command line to dispatch)."""
    parser.add_argument("--db", required=True, metavar="PATH", help="the SQLite job database")
    parser.add_argument(
        "--bind",
        default="127.0.0.1:8000",
        metavar="HOST:PORT",
        help="where to listen (default: %(default)s; port 0 picks a free port)",
    )
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument(
        "--tokens",
        metavar="FILE",
        help="bearer tokens, one 'TOKEN CALLER [CLASS]' per line ('#' comments)",
    )
    who.add_argument(
        "--caller-header",
        metavar="NAME",
        help="take the caller from this request header (only behind a trusted gateway)",
    )
    parser.add_argument(
        "--allow-private",
        action="store_true",
        help="let the built-in fetcher reach loopback, private and link-local addresses "
        "(and file:// URLs); refused by default",
    )
    parser.add_argument(
        "--fetch",
        metavar="MODULE:FUNCTION",
        help="use this async fetch function instead of the built-in fetcher",
    )
    parser.add_argument(
        "--max-body",
        type=int,
        default=DEFAULT_MAX_BODY,
        metavar="BYTES",
        help="largest request body (default: %(default)s)",
    )
    for name, help_text in (
        ("ttl", "seconds a job and its results are kept after its latest write"),
        ("targets-per-job", "most targets in one job"),
        ("jobs-per-caller", "most live jobs per caller"),
        ("jobs-total", "most live jobs in all"),
    ):
        default = getattr(Config(), name.replace("-", "_"))
        parser.add_argument(
            f"--{name}",
            type=type(default),
            default=default,
            help=f"{help_text} (default: {default:g})",
        )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )


def run_serve(args: argparse.Namespace) -> int:
    """Run ``trio-batch serve`` with parsed arguments; returns the exit code.

    Blocks until SIGINT or SIGTERM, then shuts down cleanly and returns 0. Prints
    ``listening on URL`` to standard output once the socket is bound. Bad arguments print an
    error to standard error and return 2.
    """
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        auth: Auth = (
            TokenAuth.from_file(args.tokens)
            if args.tokens is not None
            else HeaderAuth(args.caller_header)
        )
        fetch = (
            load_fetch(args.fetch)
            if args.fetch is not None
            else builtin_fetch(allow_private=args.allow_private)
        )
        config = Config(
            ttl=args.ttl,
            targets_per_job=args.targets_per_job,
            jobs_per_caller=args.jobs_per_caller,
            jobs_total=args.jobs_total,
        )
        app = create_app(db=args.db, fetch=fetch, auth=auth, config=config, max_body=args.max_body)
    except (OSError, ValueError, TypeError) as exc:
        print(f"trio-batch serve: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        async def on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    _log.info("received %s", signal.Signals(signum).name)
                    return

        async with trio.open_nursery() as nursery:
            urls = await nursery.start(
                partial(serve, app, bind=args.bind, shutdown_trigger=on_signal)
            )
            for url in urls:
                print(f"listening on {url}", flush=True)

    trio.run(main)
    return 0


def serve_main(argv: Sequence[str] | None = None) -> int:
    """``trio-batch serve`` as a stand-alone command (``python -m trio_batch.http``)."""
    parser = argparse.ArgumentParser(
        prog="trio-batch serve", description="Serve the trio-batch HTTP API."
    )
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(serve_main())
