"""The OpenAPI 3.1 description of the HTTP service, served at ``GET /openapi.json``."""

from __future__ import annotations

from typing import Any

from ._events import INLINE_RESULT
from ._openapi_batch_data import (
    LIST_FILTERS,
    batch_data_paths,
    batch_data_schemas,
)
from ._openapi_schemas import (
    _CROSS_SITE,
    _JOB_ID,
    _NOT_FOUND,
    _RETRY_AFTER,
    _UNAUTHORIZED,
    _UNAVAILABLE,
    SCHEMAS,
    _problem,
    _ref,
)
from ._openapi_snapshots import snapshot_paths, snapshot_schemas
from ._openapi_webhooks import WEBHOOK_SCHEMAS, WEBHOOKS, redeliver_path

__all__ = ["openapi_document"]


def openapi_document(*, auth_header: str | None = None) -> dict[str, Any]:
    """The OpenAPI document; ``auth_header`` names the caller header instead of bearer tokens."""
    if auth_header is None:
        scheme: dict[str, Any] = {"type": "http", "scheme": "bearer"}
    else:
        scheme = {"type": "apiKey", "in": "header", "name": auth_header}
    secured: list[dict[str, list[str]]] = [{"caller": []}]
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
            **_batch_paths(secured),
            **_job_paths(secured),
            **snapshot_paths(
                secured,
                {
                    "job_id": _JOB_ID,
                    "unauthorized": _UNAUTHORIZED,
                    "unavailable": _UNAVAILABLE,
                    "cross_site": _CROSS_SITE,
                    "problem": _problem,
                },
            ),
            **_service_paths(),
        },
    }


def _batch_paths(secured: list[dict[str, list[str]]]) -> dict[str, Any]:
    """``/v1/batches``: list and submit."""
    return {
        "/v1/batches": {
            "get": {
                "operationId": "listBatches",
                "summary": "The caller's unexpired jobs, newest first, a page at a time.",
                "security": secured,
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                    },
                    {
                        "name": "cursor",
                        "in": "query",
                        "required": False,
                        "description": "From the previous page's `next` link.",
                        "schema": {"type": "string"},
                    },
                    *LIST_FILTERS,
                ],
                "responses": {
                    "200": {
                        "description": "A page of jobs (without their targets).",
                        "content": {"application/json": {"schema": _ref("BatchPage")}},
                    },
                    "401": _UNAUTHORIZED,
                    "422": _problem("A bad limit or cursor, or an unknown parameter."),
                    "503": _UNAVAILABLE,
                },
            },
            "post": {
                "operationId": "createBatch",
                "summary": "Submit a batch (idempotent per caller and target list).",
                "security": secured,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("BatchRequest")}},
                },
                "responses": {
                    "201": {
                        "description": "A new job was created.",
                        "headers": {"Location": {"schema": {"type": "string"}}},
                        "content": {"application/json": {"schema": _ref("BatchCreated")}},
                    },
                    "200": {
                        "description": "The same batch was already submitted: its job.",
                        "headers": {"Location": {"schema": {"type": "string"}}},
                        "content": {"application/json": {"schema": _ref("BatchCreated")}},
                    },
                    "400": _problem("The body is not JSON."),
                    "401": _UNAUTHORIZED,
                    "403": _problem(
                        "caller_class differs from the one the credentials grant, or the "
                        "browser says another site made the request (Sec-Fetch-Site)."
                    ),
                    "408": _problem("The body did not arrive in time (--body-timeout)."),
                    "413": _problem("The body is larger than the service accepts."),
                    "409": _problem(
                        "The same targets were already submitted as a job with another "
                        "webhook (or none): the webhook is never dropped silently."
                    ),
                    "415": _problem("The Content-Type is not JSON."),
                    "422": _problem("Invalid or too many targets, or a malformed request."),
                    "429": _problem(
                        "The caller, or the service, has no free job slot.",
                        **{"Retry-After": _RETRY_AFTER},
                    ),
                    "503": _problem(
                        "The service is shutting down or its store cannot be used.",
                        **{"Retry-After": _RETRY_AFTER},
                    ),
                },
            },
        },
        **batch_data_paths(
            secured,
            {
                "job_id": _JOB_ID,
                "unauthorized": _UNAUTHORIZED,
                "not_found": _NOT_FOUND,
                "unavailable": _UNAVAILABLE,
                "cross_site": _CROSS_SITE,
                "problem": _problem,
            },
        ),
    }


def _job_paths(secured: list[dict[str, list[str]]]) -> dict[str, Any]:
    """One job's paths: read, forget, a target, cancel, events, redeliver."""
    return {
        "/v1/batches/{id}": {
            "get": {
                "operationId": "getBatch",
                "summary": "The job, its counts, and its targets' statuses and result sizes.",
                "security": secured,
                "parameters": [_JOB_ID],
                "responses": {
                    "200": {
                        "description": "The job.",
                        "content": {"application/json": {"schema": _ref("Batch")}},
                    },
                    "401": _UNAUTHORIZED,
                    "404": _NOT_FOUND,
                    "503": _UNAVAILABLE,
                },
            },
            "delete": {
                "operationId": "forgetBatch",
                "summary": "Forget a finished job and its results, so its targets can be "
                "submitted afresh.",
                "security": secured,
                "parameters": [_JOB_ID],
                "responses": {
                    "204": {"description": "The job and its results are deleted."},
                    "401": _UNAUTHORIZED,
                    "403": _CROSS_SITE,
                    "404": _NOT_FOUND,
                    "409": _problem("The job is live: cancel it and wait for it to end."),
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/v1/batches/{id}/targets/{idx}": {
            "get": {
                "operationId": "getBatchTarget",
                "summary": "One target of the job, with its result.",
                "security": secured,
                "parameters": [
                    _JOB_ID,
                    {
                        "name": "idx",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "integer", "minimum": 0},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The target and its result.",
                        "content": {"application/json": {"schema": _ref("TargetStatus")}},
                    },
                    "401": _UNAUTHORIZED,
                    "404": _problem("No such job for this caller, or no such target."),
                    "503": _UNAVAILABLE,
                },
            }
        },
        "/v1/batches/{id}/cancel": {
            "post": {
                "operationId": "cancelBatch",
                "summary": "Cancel a live job; the target being fetched finishes and is kept.",
                "security": secured,
                "parameters": [_JOB_ID],
                "responses": {
                    "200": {
                        "description": "The job, now cancelled.",
                        "content": {"application/json": {"schema": _ref("Job")}},
                    },
                    "401": _UNAUTHORIZED,
                    "403": _CROSS_SITE,
                    "404": _NOT_FOUND,
                    "409": _problem("The job has already finished."),
                    "415": _problem("A Content-Type was sent and it is not JSON."),
                    "503": _UNAVAILABLE,
                },
            }
        },
        "/v1/batches/{id}/webhook/redeliver": redeliver_path(
            security=secured,
            job_id=_JOB_ID,
            problems={
                "401": _UNAUTHORIZED,
                "403": _CROSS_SITE,
                "404": _problem("No such job for this caller, or it has no webhook."),
                "409": _problem("The job is still live: its event is sent once it ends."),
                "415": _problem("A Content-Type was sent and it is not JSON."),
                "503": _UNAVAILABLE,
            },
        ),
        "/v1/batches/{id}/events": {
            "get": {
                "operationId": "batchEvents",
                "summary": "Server-Sent Events: each target outcome as stored, then the job.",
                "description": "Events: `target` (id: the target's idx; data: a "
                "TargetStatus) for each stored outcome in order, then `job` (data: the "
                f"terminal Job). A result of more than {INLINE_RESULT} characters (its "
                "JSON) is not sent inline: that event's `result` is null, and its "
                "`result_size` and `result_url` say where to read it. A `shutdown` event "
                "ends the stream early if the service stops. Comment lines keep idle "
                "connections open. Send `Last-Event-ID` to skip the targets already seen.",
                "security": secured,
                "parameters": [
                    _JOB_ID,
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The event stream.",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    "401": _UNAUTHORIZED,
                    "404": _NOT_FOUND,
                    "503": _UNAVAILABLE,
                },
            }
        },
    }


def _service_paths() -> dict[str, Any]:
    """The service's own paths: health, metrics, this document."""
    return {
        "/healthz": {
            "get": {
                "operationId": "health",
                "summary": "Liveness: 200 while the service takes jobs.",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Serving.",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["status"],
                                    "properties": {"status": {"type": "string"}},
                                }
                            }
                        },
                    },
                    "503": _UNAVAILABLE,
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics in the text exposition format.",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Metrics.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document.",
                "security": [],
                "responses": {
                    "200": {
                        "description": "The OpenAPI document.",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
    }
