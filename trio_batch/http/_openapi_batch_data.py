"""The OpenAPI part of the batch-data routes (``_batch_data``): their paths, their schemas,
the metadata and custom-id fields, and the list filters; :mod:`._openapi` merges it in."""

from __future__ import annotations

from typing import Any

from .._model import (
    MAX_CUSTOM_ID_LENGTH,
    MAX_METADATA_KEY_LENGTH,
    MAX_METADATA_KEYS,
    MAX_METADATA_VALUE_LENGTH,
    JobState,
)

__all__ = ["CUSTOM_ID", "LIST_FILTERS", "METADATA", "batch_data_paths", "batch_data_schemas"]

#: A target's custom id, where a target is written (in) and read (out: null without one).
CUSTOM_ID = {"type": "string", "minLength": 1, "maxLength": MAX_CUSTOM_ID_LENGTH}
METADATA = {
    "type": "object",
    "description": "The caller's labels: filtered on by GET /v1/batches?label=key:value.",
    "maxProperties": MAX_METADATA_KEYS,
    "propertyNames": {"pattern": f"^[A-Za-z0-9_./-]{{1,{MAX_METADATA_KEY_LENGTH}}}$"},
    "additionalProperties": {"type": "string", "maxLength": MAX_METADATA_VALUE_LENGTH},
}
_STATUS_LIST = {"type": "array", "items": {"type": "string", "enum": [str(s) for s in JobState]}}
_LABELS = {"type": "array", "items": {"type": "string", "pattern": "^[^:]+:.*$"}}
_WHEN = {
    "anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}],
    "description": "Epoch seconds, or an ISO 8601 time (UTC without an offset).",
}
#: The query parameters of a filtered GET /v1/batches.
LIST_FILTERS: list[dict[str, Any]] = [
    {
        "name": "status",
        "in": "query",
        "required": False,
        "description": "Only jobs of these statuses (repeat, or a comma-separated list).",
        "schema": {"type": "string"},
    },
    {
        "name": "label",
        "in": "query",
        "required": False,
        "description": "key:value the job's metadata must hold (repeat: all must hold).",
        "schema": {"type": "string"},
    },
    {
        "name": "created_after",
        "in": "query",
        "required": False,
        "description": _WHEN["description"],
        "schema": {"type": "string"},
    },
]


def batch_data_schemas() -> dict[str, Any]:
    """The components these routes add."""
    return {
        "RetryRequest": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "only": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string", "enum": ["failed", "pending"]},
                    "description": "Which targets of the ended job to fetch again (default "
                    "failed); pending ones are those a cancel or a restart left unfetched.",
                },
                "webhook": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/WebhookRequest"},
                        {"type": "null"},
                    ],
                    "description": "The retry's webhook; without it, the ended job's own "
                    "(null: none).",
                },
            },
        },
        "BulkCancelRequest": {
            "type": "object",
            "additionalProperties": False,
            "description": "Filters as GET /v1/batches takes them (at least one, or all: "
            "true); only the caller's live jobs are cancelled.",
            "properties": {
                "status": {"anyOf": [_STATUS_LIST, _STATUS_LIST["items"]]},
                "label": {"anyOf": [_LABELS, _LABELS["items"]]},
                "created_after": _WHEN,
                "all": {"type": "boolean"},
                "dry_run": {"type": "boolean", "description": "Count, cancel nothing."},
            },
        },
        "BulkCancelled": {
            "type": "object",
            "required": ["dry_run", "count", "ids"],
            "properties": {
                "dry_run": {"type": "boolean"},
                "count": {"type": "integer", "minimum": 0},
                "ids": {"type": "array", "items": {"type": "string"}},
            },
        },
    }


def batch_data_paths(
    secured: list[dict[str, list[str]]], responses: dict[str, Any]
) -> dict[str, Any]:
    """The paths these routes add; ``responses`` holds the shared problem answers by name
    (``job_id``, ``unauthorized``, ``not_found``, ``unavailable``, ``cross_site``,
    ``problem``: a function of a description)."""
    problem = responses["problem"]
    job_id = responses["job_id"]
    common = {
        "401": responses["unauthorized"],
        "503": responses["unavailable"],
    }
    body_problems = {
        "400": problem("The body is not JSON."),
        "403": responses["cross_site"],
        "408": problem("The body did not arrive in time (--body-timeout)."),
        "413": problem("The body is larger than the service accepts."),
        "415": problem("A Content-Type was sent and it is not JSON."),
    }
    return {
        "/v1/batches/cancel": {
            "post": {
                "operationId": "cancelBatches",
                "summary": "Cancel the caller's live jobs that the filters list.",
                "security": secured,
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/BulkCancelRequest"}
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The jobs cancelled (or, with dry_run, that would be).",
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/BulkCancelled"}
                            }
                        },
                    },
                    **body_problems,
                    "422": problem("A bad filter, an unknown key, or no filter without all."),
                    **common,
                },
            }
        },
        "/v1/batches/{id}/results.jsonl": {
            "get": {
                "operationId": "exportBatch",
                "summary": "Every target, one JSON object a line, in order (streamed).",
                "security": secured,
                "parameters": [
                    job_id,
                    {
                        "name": "after",
                        "in": "query",
                        "required": False,
                        "description": "Resume after this target index.",
                        "schema": {"type": "integer", "minimum": 0},
                    },
                    {
                        "name": "merged",
                        "in": "query",
                        "required": False,
                        "description": "1: the outcomes of the job's retries in place (each "
                        "line then has the job_id whose outcome it shows).",
                        "schema": {"type": "string", "enum": ["0", "1", "true", "false"]},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "JSON Lines: idx, custom_id, url, status, then result "
                        "or error and hint.",
                        "content": {"application/jsonl": {"schema": {"type": "string"}}},
                    },
                    "404": responses["not_found"],
                    "422": problem("A bad after or merged, or an unknown parameter."),
                    **common,
                },
            }
        },
        "/v1/batches/{id}/retry": {
            "post": {
                "operationId": "retryBatch",
                "summary": "A new job of the ended job's failed (or unfetched) targets.",
                "security": secured,
                "parameters": [job_id],
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/RetryRequest"}
                        }
                    },
                },
                "responses": {
                    "201": {
                        "description": "The retry job (parent_id names this job).",
                        "headers": {"Location": {"schema": {"type": "string"}}},
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/BatchCreated"}
                            }
                        },
                    },
                    "200": {
                        "description": "The same retry was already made: its job.",
                        "headers": {"Location": {"schema": {"type": "string"}}},
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/BatchCreated"}
                            }
                        },
                    },
                    **body_problems,
                    "404": responses["not_found"],
                    "409": problem(
                        "The job is live: wait for it to end; or the same retry was made "
                        "with another webhook (or none): the webhook is never dropped silently."
                    ),
                    "422": problem("A bad only, no such target to retry, or too many."),
                    "429": problem("The caller, or the service, has no free job slot."),
                    **common,
                },
            }
        },
    }
