"""Terminal-status events: what the outbox holds for a job that ended, and its delivery state.

When a job with a webhook (or under a runner with ``Config.on_terminal``) reaches its terminal
status, the store writes a :class:`JobEvent` into its outbox in the same transaction; the
runner then delivers it, at least once, and records each attempt (:class:`Delivery`).
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EVENT_TYPES",
    "MAX_WEBHOOK_URL_LENGTH",
    "Delivery",
    "DeliveryState",
    "JobEvent",
    "new_event_id",
]

#: The event types, one per terminal status.
EVENT_TYPES = ("job.done", "job.failed", "job.partial", "job.cancelled")
#: Longest webhook URL a submit may give.
MAX_WEBHOOK_URL_LENGTH = 2048
#: Most characters of a receiver's answer kept as a delivery's ``last_answer``.
MAX_ANSWER_LENGTH = 200


def new_event_id() -> str:
    """A fresh event id (the ``webhook-id`` a receiver deduplicates on): ``msg_`` and 22
    random URL-safe characters."""
    return "msg_" + secrets.token_urlsafe(16)


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One job's terminal event, as written with its terminal status.

    ``url`` is the webhook's address (None: only ``Config.on_terminal`` is told); ``callback``
    says whether ``Config.on_terminal`` is told. The counts are the job's at the moment its
    status became terminal (a cancelled job's in-flight target is stored just after).
    ``attempts`` is how many deliveries were tried before this one in the current round.
    """

    id: str
    type: str
    job_id: str
    status: str
    error: str | None
    targets_total: int
    targets_done: int
    targets_failed: int
    at: float
    url: str | None = None
    callback: bool = False
    attempts: int = 0
    #: When the current round of attempts began (the event, or the last redelivery).
    round_from: float = 0.0
    #: The job's metadata (its labels), as submitted.
    metadata: Mapping[str, str] = field(default_factory=dict)
    #: The W3C ``traceparent`` a delivery sends (the job's stored trace context, or the
    #: delivery's span within it); None: no header.
    trace_context: str | None = None

    def payload(self) -> dict[str, Any]:
        """The event as the JSON object a receiver gets (the Standard Webhooks shape:
        ``type``, ``timestamp``, ``data``); the same for every attempt. Links are relative to
        the service's base URL."""
        when = datetime.datetime.fromtimestamp(self.at, tz=datetime.UTC)
        base = f"/v1/batches/{self.job_id}"
        return {
            "type": self.type,
            "timestamp": when.isoformat().replace("+00:00", "Z"),
            "data": {
                "id": self.job_id,
                "status": self.status,
                "error": self.error,
                "metadata": dict(self.metadata),
                "counts": {
                    "total": self.targets_total,
                    "succeeded": self.targets_done - self.targets_failed,
                    "failed": self.targets_failed,
                    "unfinished": self.targets_total - self.targets_done,
                },
                "links": {"self": base, "events": f"{base}/events"},
            },
        }


class DeliveryState:
    """A delivery's state, as :attr:`Delivery.state` gives it."""

    #: The job is still live: no event yet.
    WAITING = "waiting"
    #: An event waits for its next attempt (``next_attempt_at``).
    PENDING = "pending"
    DELIVERED = "delivered"
    #: Every attempt of the round failed; ``redeliver`` starts a new round.
    GAVE_UP = "gave_up"


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where a job's terminal event stands: what a status read shows of its webhook."""

    event_id: str
    url: str | None
    event: str | None
    attempts: int
    last_answer: str | None
    last_attempt_at: float | None
    delivered_at: float | None
    next_attempt_at: float | None
    gave_up_at: float | None

    @property
    def state(self) -> str:
        """One of :class:`DeliveryState`'s values."""
        if self.event is None:
            return DeliveryState.WAITING
        if self.next_attempt_at is not None:
            return DeliveryState.PENDING
        if self.gave_up_at is not None:
            return DeliveryState.GAVE_UP
        return DeliveryState.DELIVERED

    def to_json(self) -> dict[str, Any]:
        """The delivery state as a JSON object."""
        return {
            "url": self.url,
            "event_id": self.event_id,
            "event": self.event,
            "state": self.state,
            "attempts": self.attempts,
            "last_answer": self.last_answer,
            "last_attempt_at": self.last_attempt_at,
            "delivered_at": self.delivered_at,
            "next_attempt_at": self.next_attempt_at,
            "gave_up_at": self.gave_up_at,
        }
