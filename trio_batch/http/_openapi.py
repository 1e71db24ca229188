"""The OpenAPI 3.1 description of the HTTP service, served at ``GET /openapi.json``."""

from __future__ import annotations

from typing import Any

from ._events import INLINE_RESULT
from ._openapi_batch_data import LIST_FILTERS, batch_data_paths, batch_data_schemas
from ._openapi_parts import (
    CROSS_SITE,
    JOB_ID,
    LOCATION,
    NOT_FOUND,
    RETRY_AFTER,
    UNAUTHORIZED,
    UNAVAILABLE,
    answer,
    json_body,
    obj,
    operation,
    param,
    problem,
)
from ._openapi_schemas import SCHEMAS
from ._openapi_snapshots import snapshot_paths, snapshot_schemas
from ._openapi_webhooks import WEBHOOK_SCHEMAS, WEBHOOKS, redeliver_path

__all__ = ["openapi_document"]


def openapi_document(*, auth_header: str | None = None) -> dict[str, Any]:
    """The OpenAPI document; ``auth_header`` names the caller header instead of bearer tokens."""
    if auth_header is None:
        scheme: dict[str, Any] = {"type": "http", "scheme": "bearer"}
    else:
        scheme = {"type": "apiKey", "in": "header", "name": auth_header}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "trio-batch",
            "version": "1",
            "description": "Submit batches of URLs to fetch, follow their progress, read results.",
        },
        "components": {
            "schemas": {
                **SCHEMAS,
                **batch_data_schemas(),
                **WEBHOOK_SCHEMAS,
                **snapshot_schemas(),
            },
            "securitySchemes": {"caller": scheme},
        },
        "webhooks": WEBHOOKS,
        "paths": {
            **_batch_paths(),
            **_job_paths(),
            **snapshot_paths(),
            **_service_paths(),
        },
    }


def _batch_paths() -> dict[str, Any]:
    """``/v1/batches``: list and submit."""
    return {
        "/v1/batches": {
            "get": operation(
                "listBatches",
                "The caller's unexpired jobs, newest first, a page at a time.",
                {
                    "200": answer("A page of jobs (without their targets).", "BatchPage"),
                    "401": UNAUTHORIZED,
                    "422": problem("A bad limit or cursor, or an unknown parameter."),
                    "503": UNAVAILABLE,
                },
                parameters=[
                    param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 100}),
                    param(
                        "cursor",
                        "query",
                        {"type": "string"},
                        "From the previous page's `next` link.",
                    ),
                    *LIST_FILTERS,
                ],
            ),
            "post": operation(
                "createBatch",
                "Submit a batch (idempotent per caller and target list).",
                {
                    "201": answer("A new job was created.", "BatchCreated", headers=LOCATION),
                    "200": answer(
                        "The same batch was already submitted: its job.",
                        "BatchCreated",
                        headers=LOCATION,
                    ),
                    "400": problem("The body is not JSON."),
                    "401": UNAUTHORIZED,
                    "403": problem(
                        "caller_class differs from the one the credentials grant, or the "
                        "browser says another site made the request (Sec-Fetch-Site)."
                    ),
                    "408": problem("The body did not arrive in time (--body-timeout)."),
                    "413": problem("The body is larger than the service accepts."),
                    "409": problem(
                        "The same targets were already submitted as a job with another "
                        "webhook (or none): the webhook is never dropped silently."
                    ),
                    "415": problem("The Content-Type is not JSON."),
                    "422": problem("Invalid or too many targets, or a malformed request."),
                    "429": problem(
                        "The caller, or the service, has no free job slot.",
                        **{"Retry-After": RETRY_AFTER},
                    ),
                    "503": problem(
                        "The service is shutting down or its store cannot be used.",
                        **{"Retry-After": RETRY_AFTER},
                    ),
                },
                body=json_body("BatchRequest", required=True),
            ),
        },
        **batch_data_paths(),
    }


def _job_paths() -> dict[str, Any]:
    """One job's paths: read, forget, a target, cancel, events, redeliver."""
    return {
        "/v1/batches/{id}": {
            "get": operation(
                "getBatch",
                "The job, its counts, and its targets' statuses and result sizes.",
                {
                    "200": answer("The job.", "Batch"),
                    "401": UNAUTHORIZED,
                    "404": NOT_FOUND,
                    "503": UNAVAILABLE,
                },
                parameters=[JOB_ID],
            ),
            "delete": operation(
                "forgetBatch",
                "Forget a finished job and its results, so its targets can be submitted afresh.",
                {
                    "204": {"description": "The job and its results are deleted."},
                    "401": UNAUTHORIZED,
                    "403": CROSS_SITE,
                    "404": NOT_FOUND,
                    "409": problem("The job is live: cancel it and wait for it to end."),
                    "503": UNAVAILABLE,
                },
                parameters=[JOB_ID],
            ),
        },
        "/v1/batches/{id}/targets/{idx}": {
            "get": operation(
                "getBatchTarget",
                "One target of the job, with its result.",
                {
                    "200": answer("The target and its result.", "TargetStatus"),
                    "401": UNAUTHORIZED,
                    "404": problem("No such job for this caller, or no such target."),
                    "503": UNAVAILABLE,
                },
                parameters=[JOB_ID, param("idx", "path", {"type": "integer", "minimum": 0})],
            )
        },
        "/v1/batches/{id}/cancel": {
            "post": operation(
                "cancelBatch",
                "Cancel a live job; the target being fetched finishes and is kept.",
                {
                    "200": answer("The job, now cancelled.", "Job"),
                    "401": UNAUTHORIZED,
                    "403": CROSS_SITE,
                    "404": NOT_FOUND,
                    "409": problem("The job has already finished."),
                    "415": problem("A Content-Type was sent and it is not JSON."),
                    "503": UNAVAILABLE,
                },
                parameters=[JOB_ID],
            )
        },
        "/v1/batches/{id}/webhook/redeliver": redeliver_path(),
        "/v1/batches/{id}/events": {
            "get": operation(
                "batchEvents",
                "Server-Sent Events: each target outcome as stored, then the job.",
                {
                    "200": answer(
                        "The event stream.", {"type": "string"}, media="text/event-stream"
                    ),
                    "401": UNAUTHORIZED,
                    "404": NOT_FOUND,
                    "503": UNAVAILABLE,
                },
                description="Events: `target` (id: the target's idx; data: a TargetStatus) "
                "for each stored outcome in order, then `job` (data: the terminal Job). A "
                f"result of more than {INLINE_RESULT} characters (its JSON) is not sent "
                "inline: that event's `result` is null, and its `result_size` and "
                "`result_url` say where to read it. A `shutdown` event ends the stream early "
                "if the service stops. Comment lines keep idle connections open. Send "
                "`Last-Event-ID` to skip the targets already seen.",
                parameters=[JOB_ID, param("Last-Event-ID", "header", {"type": "string"})],
            )
        },
    }


def _service_paths() -> dict[str, Any]:
    """The service's own paths: health, metrics, this document."""
    return {
        "/healthz": {
            "get": operation(
                "health",
                "Liveness: 200 while the service takes jobs.",
                {
                    "200": answer("Serving.", obj({"status": {"type": "string"}})),
                    "503": UNAVAILABLE,
                },
                security=[],
            )
        },
        "/metrics": {
            "get": operation(
                "metrics",
                "Prometheus metrics in the text exposition format.",
                {"200": answer("Metrics.", {"type": "string"}, media="text/plain")},
                security=[],
            )
        },
        "/openapi.json": {
            "get": operation(
                "openapi",
                "This document.",
                {"200": answer("The OpenAPI document.", {"type": "object"})},
                security=[],
            )
        },
    }
