"""The service's side of webhooks: a submit's ``"webhook"``, a job's delivery state, and
``POST /v1/batches/{id}/webhook/redeliver``.

Signing and sending are :class:`~trio_batch.fetchers.WebhookSender`'s, which ``trio-batch
serve --webhook-secret-file`` wires into the runner; the runner's outbox does the rest (see
:mod:`trio_batch.runner._deliveries`).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._errors import InvalidRequest
from .._text import unknown_keys
from ._bodies import require_json
from ._problems import Problem, not_found
from ._service import Service

__all__ = ["delivery_json", "parse_webhook", "webhook_routes"]


def parse_webhook(obj: dict[str, Any]) -> str | None:
    """The webhook URL of a submit's body (``"webhook": {"url": ...}``), or None without one;
    raises :class:`~trio_batch.InvalidRequest` for a malformed one. The URL itself is checked
    by the runner's webhook sender."""
    if "webhook" not in obj or obj["webhook"] is None:
        return None
    hook = obj["webhook"]
    if not isinstance(hook, dict):
        raise InvalidRequest('webhook must be an object {"url": "https://..."}')
    unknown = unknown_keys(hook, ("url",))
    if unknown:
        raise InvalidRequest(f"unknown key(s) {unknown} in webhook; it has 'url'")
    if "url" not in hook:
        raise InvalidRequest('webhook needs "url", the https:// address to POST the event to')
    url = hook["url"]
    if not isinstance(url, str):
        raise InvalidRequest("webhook.url must be a string")
    return url


async def delivery_json(service: Service, job_id: str) -> dict[str, Any] | None:
    """The job's webhook delivery state as JSON (see :class:`~trio_batch.Delivery`), or None
    for a job without a webhook."""
    delivery = await service.runner.delivery(job_id)
    return None if delivery is None else delivery.to_json()


async def redeliver(request: Request) -> Response:
    """POST /v1/batches/{id}/webhook/redeliver: send the ended job's event again (same
    ``webhook-id``), a new round of attempts; 202 with the delivery state."""
    service = Service.of(request)
    caller = service.caller(request)
    require_json(request, body_expected=False)
    job = await service.owned_job(request, caller)
    if job.status.is_live:
        raise Problem(
            409,
            "job-live",
            "Conflict",
            f"the job is {job.status}; its event is sent once it ends",
        )
    delivery = await service.runner.redeliver(job.id)
    if delivery is None:
        raise not_found("the job has no webhook")
    return JSONResponse(delivery.to_json(), status_code=202)


def webhook_routes() -> list[Route]:
    """The webhook routes, for the application's route table."""
    return [Route("/v1/batches/{id}/webhook/redeliver", redeliver, methods=["POST"])]
