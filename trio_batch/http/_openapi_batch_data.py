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
from ..store import LATEST_TIME
from ._batch_data import AFTER_DIGITS
from ._openapi_parts import (
    BODY_PROBLEMS,
    JOB_ID,
    LOCATION,
    NOT_FOUND,
    UNAUTHORIZED,
    UNAVAILABLE,
    answer,
    json_body,
    obj,
    operation,
    param,
    problem,
    ref,
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
_WHEN_TEXT = "Epoch seconds (up to the year 9999), or an ISO 8601 time (UTC without an offset)."
_WHEN = {
    "anyOf": [{"type": "number", "minimum": 0, "maximum": LATEST_TIME}, {"type": "string"}],
    "description": _WHEN_TEXT,
}
#: The query parameters of a filtered GET /v1/batches.
LIST_FILTERS: list[dict[str, Any]] = [
    param(
        "status",
        "query",
        {"type": "string"},
        "Only jobs of these statuses (repeat, or a comma-separated list).",
    ),
    param(
        "label",
        "query",
        {"type": "string"},
        "key:value the job's metadata must hold (repeat: all must hold).",
    ),
    param("created_after", "query", {"type": "string"}, _WHEN_TEXT),
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
                    "oneOf": [ref("WebhookRequest"), {"type": "null"}],
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
        "BulkCancelled": obj(
            {
                "dry_run": {"type": "boolean"},
                "count": {"type": "integer", "minimum": 0},
                "ids": {"type": "array", "items": {"type": "string"}},
            }
        ),
    }


def batch_data_paths() -> dict[str, Any]:
    """The paths these routes add."""
    common = {"401": UNAUTHORIZED, "503": UNAVAILABLE}
    return {
        "/v1/batches/cancel": {
            "post": operation(
                "cancelBatches",
                "Cancel the caller's live jobs that the filters list.",
                {
                    "200": answer(
                        "The jobs cancelled (or, with dry_run, that would be).", "BulkCancelled"
                    ),
                    **BODY_PROBLEMS,
                    "422": problem("A bad filter, an unknown key, or no filter without all."),
                    **common,
                },
                body=json_body("BulkCancelRequest"),
            )
        },
        "/v1/batches/{id}/results.jsonl": {
            "get": operation(
                "exportBatch",
                "Every target, one JSON object a line, in order (streamed).",
                {
                    "200": answer(
                        "JSON Lines: idx, custom_id, url, status, then result or error and hint.",
                        {"type": "string"},
                        media="application/jsonl",
                    ),
                    "404": NOT_FOUND,
                    "422": problem("A bad after or merged, or an unknown parameter."),
                    **common,
                },
                parameters=[
                    JOB_ID,
                    param(
                        "after",
                        "query",
                        {"type": "integer", "minimum": 0, "maximum": 10**AFTER_DIGITS - 1},
                        "Resume after this target index.",
                    ),
                    param(
                        "merged",
                        "query",
                        {"type": "string", "enum": ["0", "1", "true", "false"]},
                        "1: the outcomes of the job's retries in place (each line then has the "
                        "job_id whose outcome it shows).",
                    ),
                ],
            )
        },
        "/v1/batches/{id}/retry": {
            "post": operation(
                "retryBatch",
                "A new job of the ended job's failed (or unfetched) targets.",
                {
                    "201": answer(
                        "The retry job (parent_id names this job).",
                        "BatchCreated",
                        headers=LOCATION,
                    ),
                    "200": answer(
                        "The same retry was already made: its job.",
                        "BatchCreated",
                        headers=LOCATION,
                    ),
                    **BODY_PROBLEMS,
                    "404": NOT_FOUND,
                    "409": problem(
                        "The job is live: wait for it to end; or the same retry was made "
                        "with another webhook (or none): the webhook is never dropped silently."
                    ),
                    "422": problem("A bad only, no such target to retry, or too many."),
                    "429": problem("The caller, or the service, has no free job slot."),
                    **common,
                },
                parameters=[JOB_ID],
                body=json_body("RetryRequest"),
            )
        },
    }
