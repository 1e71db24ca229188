"""Problem documents (RFC 9457): the one table from typed errors to status, kind and title."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response

from .._errors import (
    BatchError,
    Busy,
    CallerBusy,
    InvalidRequest,
    InvalidTargets,
    JobGone,
    JobLive,
    OutcomeExists,
    RunnerClosed,
    StoreError,
    TooManyTargets,
    WebhookConflict,
)
from ._headers import API_HEADERS

__all__ = [
    "PROBLEMS",
    "PROBLEM_JSON",
    "Problem",
    "ProblemType",
    "not_found",
    "problem_for",
    "problem_for_http",
    "problem_type",
]

PROBLEM_JSON = "application/problem+json"
_log = logging.getLogger("trio_batch.http")


class Problem(Exception):
    """Raised by a handler to answer with a problem document."""

    def __init__(
        self,
        status: int,
        kind: str,
        title: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.title = title
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = extra

    def response(self) -> Response:
        """The problem as an ``application/problem+json`` response."""
        body = {
            "type": f"urn:trio-batch:problem:{self.kind}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            **self.extra,
        }
        # The security headers too: a 500 is sent by Starlette's error middleware, outside
        # the middleware that adds them to every other answer.
        headers = {**API_HEADERS, **self.headers}
        return JSONResponse(body, status_code=self.status, headers=headers, media_type=PROBLEM_JSON)


class ProblemType(NamedTuple):
    """What a problem document says about a kind of error: its status, kind and title."""

    status: int
    kind: str  # the type is urn:trio-batch:problem:<kind>
    title: str


#: The problem each typed error answers with. A class that is not listed answers with the row
#: of its nearest listed base class (see :func:`problem_type`); BatchError is the catch-all.
PROBLEMS: Mapping[type[BatchError], ProblemType] = {
    BatchError: ProblemType(500, "error", "Service error"),
    InvalidRequest: ProblemType(422, "invalid-request", "Invalid request"),
    InvalidTargets: ProblemType(422, "invalid-targets", "Invalid targets"),
    TooManyTargets: ProblemType(422, "too-many-targets", "Too many targets"),
    CallerBusy: ProblemType(429, "caller-busy", "Caller busy"),
    Busy: ProblemType(429, "busy", "Service busy"),
    JobLive: ProblemType(409, "job-live", "Conflict"),
    WebhookConflict: ProblemType(409, "webhook-conflict", "Conflict"),
    JobGone: ProblemType(404, "not-found", "Not found"),
    RunnerClosed: ProblemType(503, "shutting-down", "Shutting down"),
    StoreError: ProblemType(503, "store-unavailable", "Service error"),
    OutcomeExists: ProblemType(409, "error", "Service error"),
}

#: Starlette's own errors (an unknown path, a wrong method) by status; others are "http-error".
_HTTP_ERRORS: Mapping[int, tuple[str, str]] = {
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Not allowed"),
}


def problem_type(error: type[BatchError]) -> ProblemType:
    """The row of :data:`PROBLEMS` for ``error``: its own, or its nearest listed base class's."""
    for cls in error.__mro__:
        row = PROBLEMS.get(cls)
        if row is not None:
            return row
    raise AssertionError(f"{error!r} is not a BatchError")  # pragma: no cover - typed as one


def problem_for(exc: BatchError, *, retry_after: int) -> Problem:
    """The problem document answering ``exc``, with ``Retry-After`` on a 429 or 503.

    The detail of a 5xx other than shutting down is logged and replaced with a generic one: it
    is about the store, not something the caller can act on.
    """
    status, kind, title = problem_type(type(exc))
    headers = {"Retry-After": str(retry_after)} if status in (429, 503) else {}
    extra: dict[str, Any] = {}
    if isinstance(exc, InvalidTargets):
        fields = {"index": exc.index, "option": exc.option, "hint": exc.hint}
        extra.update((name, value) for name, value in fields.items() if value is not None)
    elif isinstance(hint := getattr(exc, "hint", None), str):  # a refused replay, say
        extra["hint"] = hint
    if isinstance(exc, CallerBusy) and exc.job_id is not None:
        extra["job"] = f"/v1/batches/{exc.job_id}"  # the live job that blocks the caller
    elif isinstance(exc, WebhookConflict):
        extra["job"] = f"/v1/batches/{exc.job_id}"  # the caller's job a reuse would return
    detail = str(exc)
    if status >= 500 and not isinstance(exc, RunnerClosed):
        _log.error("store error: %s", exc)
        detail = "the job store cannot be used right now; try again later"
    return Problem(status, kind, title, detail, headers=headers, **extra)


def problem_for_http(exc: HTTPException) -> Problem:
    """The problem document answering one of Starlette's own errors (404, 405, ...)."""
    kind, title = _HTTP_ERRORS.get(exc.status_code, ("http-error", "HTTP error"))
    return Problem(exc.status_code, kind, title, str(exc.detail), headers=exc.headers)


def not_found(what: str = "no such job") -> Problem:
    """A 404: no such job for this caller (unknown, lapsed, or another caller's)."""
    return Problem(404, "not-found", "Not found", what)
