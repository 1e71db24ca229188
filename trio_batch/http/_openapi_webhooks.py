"""The webhook parts of the OpenAPI document: the submit's ``webhook``, a job's delivery
state, the redeliver path, and the event a receiver gets (OpenAPI 3.1 ``webhooks``)."""

from __future__ import annotations

from typing import Any

from .._event import EVENT_TYPES, MAX_WEBHOOK_URL_LENGTH, DeliveryState

__all__ = ["WEBHOOKS", "WEBHOOK_SCHEMAS", "redeliver_path"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}]}


_STATES = [
    DeliveryState.WAITING,
    DeliveryState.PENDING,
    DeliveryState.DELIVERED,
    DeliveryState.GAVE_UP,
]

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
    "Delivery": {
        "type": "object",
        "description": "Where the job's terminal event stands.",
        "required": ["url", "event_id", "event", "state", "attempts"],
        "properties": {
            "url": _nullable({"type": "string"}),
            "event_id": {
                "type": "string",
                "description": "The webhook-id header of every attempt: deduplicate on it.",
            },
            "event": _nullable({"type": "string", "enum": list(EVENT_TYPES)}),
            "state": {"type": "string", "enum": _STATES},
            "attempts": {"type": "integer", "minimum": 0},
            "last_answer": _nullable({"type": "string"}),
            "last_attempt_at": _nullable({"type": "number"}),
            "delivered_at": _nullable({"type": "number"}),
            "next_attempt_at": _nullable({"type": "number"}),
            "gave_up_at": _nullable({"type": "number"}),
        },
    },
    "JobEvent": {
        "type": "object",
        "description": "The body of a webhook POST. Headers: webhook-id (the same for every "
        "attempt), webhook-timestamp (Unix seconds), webhook-signature (v1,<base64 "
        "HMAC-SHA256 of id.timestamp.body>); verify with the standardwebhooks library.",
        "required": ["type", "timestamp", "data"],
        "properties": {
            "type": {"type": "string", "enum": list(EVENT_TYPES)},
            "timestamp": {"type": "string", "format": "date-time"},
            "data": {
                "type": "object",
                "required": ["id", "status", "error", "metadata", "counts", "links"],
                "properties": {
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
                },
            },
        },
    },
}

WEBHOOKS: dict[str, Any] = {
    "jobEnded": {
        "post": {
            "summary": "A job reached its terminal status (at least once, retried with "
            "backoff for up to a day until a 2xx answer; redirects are not followed).",
            "requestBody": {"content": {"application/json": {"schema": _ref("JobEvent")}}},
            "responses": {"2XX": {"description": "Taken; any other answer is retried."}},
        }
    }
}


def redeliver_path(
    *, security: list[dict[str, list[str]]], job_id: dict[str, Any], problems: dict[str, Any]
) -> dict[str, Any]:
    """``POST /v1/batches/{id}/webhook/redeliver``, with the document's shared parts."""
    return {
        "post": {
            "operationId": "redeliverWebhook",
            "summary": "Send the ended job's event again (same webhook-id): a new round of "
            "attempts.",
            "security": security,
            "parameters": [job_id],
            "responses": {
                "202": {
                    "description": "The delivery state, due now.",
                    "content": {"application/json": {"schema": _ref("Delivery")}},
                },
                **problems,
            },
        }
    }
