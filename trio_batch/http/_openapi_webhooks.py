"""The webhook parts of the OpenAPI document: the submit's ``webhook``, a job's delivery
state, the redeliver path, and the event a receiver gets (OpenAPI 3.1 ``webhooks``)."""

from __future__ import annotations

from typing import Any

from .._event import EVENT_TYPES, MAX_WEBHOOK_URL_LENGTH, DeliveryState
from ._openapi_parts import (
    CROSS_SITE,
    JOB_ID,
    UNAUTHORIZED,
    UNAVAILABLE,
    answer,
    obj,
    operation,
    problem,
    ref,
)

__all__ = ["WEBHOOKS", "WEBHOOK_SCHEMAS", "redeliver_path"]


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}]}


_STATES = [
    DeliveryState.WAITING,
    DeliveryState.PENDING,
    DeliveryState.DELIVERED,
    DeliveryState.GAVE_UP,
]

_DELIVERY_TIMES = ("last_attempt_at", "delivered_at", "next_attempt_at", "gave_up_at")

WEBHOOK_SCHEMAS: dict[str, Any] = {
    "WebhookRequest": {
        "type": "object",
        "required": ["url"],
        "additionalProperties": False,
        "description": "Where to POST the job's terminal event, signed per Standard Webhooks. "
        "https:// only (plain http and private addresses only on a service started with "
        "--allow-private); the service must have been started with --webhook-secret-file.",
        "properties": {"url": {"type": "string", "maxLength": MAX_WEBHOOK_URL_LENGTH}},
    },
    "Delivery": obj(
        {
            "url": _nullable({"type": "string"}),
            "event_id": {
                "type": "string",
                "description": "The webhook-id header of every attempt: deduplicate on it.",
            },
            "event": _nullable({"type": "string", "enum": list(EVENT_TYPES)}),
            "state": {"type": "string", "enum": _STATES},
            "attempts": {"type": "integer", "minimum": 0},
            "last_answer": _nullable({"type": "string"}),
            **{name: _nullable({"type": "number"}) for name in _DELIVERY_TIMES},
        },
        optional=("last_answer", *_DELIVERY_TIMES),
        description="Where the job's terminal event stands.",
    ),
    "JobEvent": obj(
        {
            "type": {"type": "string", "enum": list(EVENT_TYPES)},
            "timestamp": {"type": "string", "format": "date-time"},
            "data": obj(
                {
                    "id": {"type": "string"},
                    "status": {"type": "string"},
                    "error": _nullable({"type": "string"}),
                    "metadata": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                    },
                    "counts": {
                        "type": "object",
                        "description": "As the job's status became terminal.",
                        "properties": {
                            k: {"type": "integer", "minimum": 0}
                            for k in ("total", "succeeded", "failed", "unfinished")
                        },
                    },
                    "links": {
                        "type": "object",
                        "description": "Paths relative to the service's base URL.",
                        "properties": {
                            "self": {"type": "string"},
                            "events": {"type": "string"},
                        },
                    },
                }
            ),
        },
        description="The body of a webhook POST. Headers: webhook-id (the same for every "
        "attempt), webhook-timestamp (Unix seconds), webhook-signature (v1,<base64 "
        "HMAC-SHA256 of id.timestamp.body>); verify with the standardwebhooks library.",
    ),
}

WEBHOOKS: dict[str, Any] = {
    "jobEnded": {
        "post": {
            "summary": "A job reached its terminal status (at least once, retried with "
            "backoff for up to a day until a 2xx answer; redirects are not followed).",
            "requestBody": {"content": {"application/json": {"schema": ref("JobEvent")}}},
            "responses": {"2XX": {"description": "Taken; any other answer is retried."}},
        }
    }
}


def redeliver_path() -> dict[str, Any]:
    """``POST /v1/batches/{id}/webhook/redeliver``."""
    return {
        "post": operation(
            "redeliverWebhook",
            "Send the ended job's event again (same webhook-id): a new round of attempts.",
            {
                "202": answer("The delivery state, due now.", "Delivery"),
                "401": UNAUTHORIZED,
                "403": CROSS_SITE,
                "404": problem("No such job for this caller, or it has no webhook."),
                "409": problem("The job is still live: its event is sent once it ends."),
                "415": problem("A Content-Type was sent and it is not JSON."),
                "503": UNAVAILABLE,
            },
            parameters=[JOB_ID],
        )
    }
