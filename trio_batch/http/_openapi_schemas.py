"""The OpenAPI document's building blocks: its component schemas and the helpers its paths
share (references, problem answers, the job id parameter)."""

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
from ._openapi_batch_data import (
    CUSTOM_ID,
    METADATA,
)
from ._openapi_snapshots import FETCH_META, SUBMIT_PROPERTIES
from ._problems import PROBLEM_JSON

__all__ = ["SCHEMAS"]


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


SCHEMAS: dict[str, Any] = {
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
                "description": "What to do about it: the refused option of invalid targets, "
                "or a refused replay.",
            },
            "job": {
                "type": "string",
                "description": "For caller-busy: the path of the live job that blocks the "
                "caller; for webhook-conflict: the path of the job a reuse would return.",
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
            **SUBMIT_PROPERTIES,
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
                    "properties": {"content": {"type": "string"}, "meta": FETCH_META},
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
