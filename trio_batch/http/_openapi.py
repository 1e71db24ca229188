"""The OpenAPI 3.1 description of the HTTP service, served at ``GET /openapi.json``."""

from __future__ import annotations

import dataclasses
from typing import Any

from .._model import (
    MAX_CALLER_LENGTH,
    MAX_OPTION_LENGTH,
    MAX_URL_LENGTH,
    JobState,
    Options,
    TargetState,
)
from ._events import INLINE_RESULT
from ._openapi_batch_data import (
    CUSTOM_ID,
    LIST_FILTERS,
    METADATA,
    batch_data_paths,
    batch_data_schemas,
)
from ._openapi_webhooks import WEBHOOK_SCHEMAS, WEBHOOKS, redeliver_path
from ._problems import PROBLEM_JSON

__all__ = ["openapi_document"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _problem(description: str, **headers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": _ref("Problem")}},
    }
    if headers:
        out["headers"] = headers
    return out


_RETRY_AFTER = {
    "description": "Seconds to wait before trying again.",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}
_CROSS_SITE = _problem("The browser says another site made the request (Sec-Fetch-Site).")
_UNAUTHORIZED = _problem(
    "Missing or invalid credentials.",
    **{"WWW-Authenticate": {"schema": {"type": "string"}}},
)
_RESULT_SIZE = "Characters of the result's compact JSON (content and meta); 0 without one."
_NOT_FOUND = _problem("No such job for this caller (unknown, lapsed, or another caller's).")
_UNAVAILABLE = _problem("The service is shutting down or its store cannot be used.")
_JOB_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The job id returned by POST /v1/batches.",
    "schema": {"type": "string"},
}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_SCHEMAS: dict[str, Any] = {
    "Problem": {
        "type": "object",
        "description": "An RFC 9457 problem document.",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "index": {
                "type": "integer",
                "description": "For invalid targets: the position of the offending target.",
            },
            "option": {
                "type": "string",
                "description": "For invalid targets: the option the fetch function refused.",
            },
            "hint": {
                "type": "string",
                "description": "For invalid targets: what to do about the refused option.",
            },
            "job": {
                "type": "string",
                "description": "For caller-busy: the path of the live job that blocks the caller.",
            },
        },
    },
    "Options": {
        "type": "object",
        "description": "How to fetch a target; the meaning of each belongs to the fetch function.",
        "additionalProperties": False,
        "properties": {  # from the dataclass, so a new option is documented as it lands
            f.name: (
                {"type": "boolean"}
                if f.type == "bool"
                else {"type": "string", "maxLength": MAX_OPTION_LENGTH}
            )
            for f in dataclasses.fields(Options)
        },
    },
    "Target": {
        "type": "object",
        "required": ["url"],
        "additionalProperties": False,
        "properties": {
            "url": {"type": "string", "minLength": 1, "maxLength": MAX_URL_LENGTH},
            "options": _ref("Options"),
            "custom_id": CUSTOM_ID,
        },
    },
    "BatchRequest": {
        "type": "object",
        "required": ["targets"],
        "additionalProperties": False,
        "properties": {
            "targets": {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": _ref("Target"),
            },
            "caller_class": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_CALLER_LENGTH,
                "description": "Must match the class the credentials grant, if given.",
            },
            "metadata": METADATA,
            "webhook": _ref("WebhookRequest"),
        },
    },
    "Counts": {
        "type": "object",
        "description": "How many of the job's targets are in each status.",
        "required": [str(s) for s in TargetState],
        "properties": {str(s): {"type": "integer", "minimum": 0} for s in TargetState},
    },
    "Job": {
        "type": "object",
        "required": [
            "id",
            "status",
            "error",
            "targets_total",
            "targets_done",
            "targets_failed",
            "caller",
            "caller_class",
            "created_at",
            "updated_at",
            "expires_at",
            "counts",
        ],
        "properties": {
            "id": {"type": "string"},
            "status": {"type": "string", "enum": [str(s) for s in JobState]},
            "error": _nullable({"type": "string"}),
            "targets_total": {"type": "integer"},
            "targets_done": {
                "type": "integer",
                "description": "Targets with a stored outcome, failed ones included.",
            },
            "targets_failed": {"type": "integer"},
            "caller": {"type": "string"},
            "caller_class": {"type": "string"},
            "idem_key": {"type": "string"},
            "created_at": {"type": "number", "description": "Unix epoch seconds."},
            "updated_at": {"type": "number", "description": "Unix epoch seconds."},
            "expires_at": {
                "type": "number",
                "description": "Unix epoch seconds; the job and its results are gone after it.",
            },
            "counts": _ref("Counts"),
            "metadata": METADATA,
            "parent_id": _nullable({"type": "string", "description": "The job this retries."}),
        },
    },
    "BatchCreated": {
        "allOf": [
            _ref("Job"),
            {
                "type": "object",
                "required": ["reused"],
                "properties": {
                    "reused": {
                        "type": "boolean",
                        "description": "True if the same targets were already submitted by "
                        "this caller within the job's lease: that job is returned.",
                    }
                },
            },
        ]
    },
    "TargetStatus": {
        "type": "object",
        "required": [
            "idx",
            "url",
            "options",
            "status",
            "result",
            "error",
            "hint",
            "finished_at",
            "attempts",
        ],
        "properties": {
            "idx": {"type": "integer"},
            "custom_id": _nullable(CUSTOM_ID),
            "url": {"type": "string"},
            "options": {"type": "object"},
            "status": {"type": "string", "enum": [str(s) for s in TargetState]},
            "result": _nullable(
                {
                    "type": "object",
                    "required": ["content", "meta"],
                    "properties": {"content": {"type": "string"}, "meta": {"type": "object"}},
                }
            ),
            "error": _nullable({"type": "string"}),
            "hint": _nullable({"type": "string"}),
            "finished_at": _nullable({"type": "number"}),
            "attempts": {
                "type": "integer",
                "minimum": 0,
                "description": "Attempts the stored outcome took (more than 1 after retries); "
                "0 while the target has no outcome.",
            },
        },
    },
    "TargetSummary": {
        "type": "object",
        "description": "A target in the job view: its outcome without the result's content.",
        "required": [
            "idx",
            "url",
            "options",
            "status",
            "error",
            "hint",
            "finished_at",
            "result_size",
            "result_url",
        ],
        "properties": {
            "idx": {"type": "integer"},
            "custom_id": _nullable(CUSTOM_ID),
            "url": {"type": "string"},
            "options": {"type": "object"},
            "status": {"type": "string", "enum": [str(s) for s in TargetState]},
            "error": _nullable({"type": "string"}),
            "hint": _nullable({"type": "string"}),
            "finished_at": _nullable({"type": "number"}),
            "result_size": {"type": "integer", "description": _RESULT_SIZE},
            "result_url": _nullable({"type": "string"}),
        },
    },
    "BatchPage": {
        "type": "object",
        "required": ["jobs", "next"],
        "properties": {
            "jobs": {"type": "array", "items": _ref("Job")},
            "next": {
                "type": ["string", "null"],
                "description": "The next page's path and query; null on the last page.",
            },
        },
    },
    "Batch": {
        "allOf": [
            _ref("Job"),
            {
                "type": "object",
                "required": ["targets"],
                "properties": {
                    "targets": {"type": "array", "items": _ref("TargetSummary")},
                    "webhook": _nullable(_ref("Delivery")),
                },
            },
        ]
    },
}


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
            "schemas": {**_SCHEMAS, **batch_data_schemas(), **WEBHOOK_SCHEMAS},
            "securitySchemes": {"caller": scheme},
        },
        "webhooks": WEBHOOKS,
        "paths": {
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
        },
    }
