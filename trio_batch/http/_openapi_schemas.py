"""The OpenAPI document's component schemas of jobs and targets."""

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
from ._openapi_batch_data import CUSTOM_ID, METADATA
from ._openapi_parts import nullable, obj, ref
from ._openapi_snapshots import FETCH_META, SUBMIT_PROPERTIES

__all__ = ["SCHEMAS"]

_RESULT_SIZE = "Characters of the result's compact JSON (content and meta); 0 without one."
_TARGET_STATES = {"type": "string", "enum": [str(s) for s in TargetState]}
#: A target and its outcome, as ``GET /v1/batches/{id}/targets/{idx}`` answers it.
_TARGET_STATUS: dict[str, Any] = {
    "idx": {"type": "integer"},
    "custom_id": nullable(CUSTOM_ID),
    "url": {"type": "string"},
    "options": {"type": "object"},
    "status": _TARGET_STATES,
    "result": nullable(
        obj({"content": {"type": "string"}, "meta": FETCH_META}),
    ),
    "error": nullable({"type": "string"}),
    "hint": nullable({"type": "string"}),
    "finished_at": nullable({"type": "number"}),
    "attempts": {
        "type": "integer",
        "minimum": 0,
        "description": "Attempts the stored outcome took (more than 1 after retries); "
        "0 while the target has no outcome.",
    },
}

SCHEMAS: dict[str, Any] = {
    "Problem": obj(
        {
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
        optional=("index", "option", "hint", "job"),
        description="An RFC 9457 problem document.",
    ),
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
    "Target": obj(
        {
            "url": {"type": "string", "minLength": 1, "maxLength": MAX_URL_LENGTH},
            "options": ref("Options"),
            "custom_id": CUSTOM_ID,
        },
        optional=("options", "custom_id"),
        closed=True,
    ),
    "BatchRequest": obj(
        {
            "targets": {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": ref("Target"),
            },
            "caller_class": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_CALLER_LENGTH,
                "description": "Must match the class the credentials grant, if given.",
            },
            "metadata": METADATA,
            "webhook": ref("WebhookRequest"),
            **SUBMIT_PROPERTIES,
        },
        optional=("caller_class", "metadata", "webhook", *SUBMIT_PROPERTIES),
        closed=True,
    ),
    "Counts": obj(
        {str(s): {"type": "integer", "minimum": 0} for s in TargetState},
        description="How many of the job's targets are in each status.",
    ),
    "Job": obj(
        {
            "id": {"type": "string"},
            "status": {"type": "string", "enum": [str(s) for s in JobState]},
            "error": nullable({"type": "string"}),
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
            "counts": ref("Counts"),
            "metadata": METADATA,
            "parent_id": nullable({"type": "string", "description": "The job this retries."}),
        },
        optional=("idem_key", "metadata", "parent_id"),
    ),
    "BatchCreated": {
        "allOf": [
            ref("Job"),
            obj(
                {
                    "reused": {
                        "type": "boolean",
                        "description": "True if the same targets were already submitted by "
                        "this caller within the job's lease: that job is returned.",
                    }
                }
            ),
        ]
    },
    "TargetStatus": obj(_TARGET_STATUS, optional=("custom_id",)),
    # The job view's: the outcome without the result's content, and where to read it.
    "TargetSummary": obj(
        {
            **{k: v for k, v in _TARGET_STATUS.items() if k not in ("result", "attempts")},
            "result_size": {"type": "integer", "description": _RESULT_SIZE},
            "result_url": nullable({"type": "string"}),
        },
        optional=("custom_id",),
        description="A target in the job view: its outcome without the result's content.",
    ),
    "BatchPage": obj(
        {
            "jobs": {"type": "array", "items": ref("Job")},
            "next": {
                "type": ["string", "null"],
                "description": "The next page's path and query; null on the last page.",
            },
        }
    ),
    "Batch": {
        "allOf": [
            ref("Job"),
            obj(
                {
                    "targets": {"type": "array", "items": ref("TargetSummary")},
                    "webhook": nullable(ref("Delivery")),
                },
                optional=("webhook",),
            ),
        ]
    },
}
