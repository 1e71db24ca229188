"""The OpenAPI document's shared parts: references, object schemas, parameters, answers, and the
problem answers and the job id parameter every path module uses."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ._problems import PROBLEM_JSON

__all__ = [
    "BODY_PROBLEMS",
    "CROSS_SITE",
    "JOB_ID",
    "LOCATION",
    "NOT_FOUND",
    "RETRY_AFTER",
    "SECURED",
    "UNAUTHORIZED",
    "UNAVAILABLE",
    "answer",
    "json_body",
    "nullable",
    "obj",
    "operation",
    "param",
    "problem",
    "ref",
]

#: An operation's ``security``: the caller's credentials (the scheme is the document's).
SECURED: list[dict[str, list[str]]] = [{"caller": []}]


def ref(name: str) -> dict[str, str]:
    """A reference to the component schema ``name``."""
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema``, or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def obj(
    properties: dict[str, Any],
    *,
    optional: Collection[str] = (),
    description: str | None = None,
    closed: bool = False,
) -> dict[str, Any]:
    """An object schema whose ``properties`` are all required but the ``optional`` ones;
    ``closed``: no other property is allowed."""
    out: dict[str, Any] = {"type": "object"}
    if description is not None:
        out["description"] = description
    out["required"] = [name for name in properties if name not in optional]
    if closed:
        out["additionalProperties"] = False
    out["properties"] = properties
    return out


def param(
    name: str, where: str, schema: dict[str, Any], description: str | None = None
) -> dict[str, Any]:
    """A parameter ``where`` (``path``, ``query`` or ``header``); a path's is required."""
    out: dict[str, Any] = {"name": name, "in": where, "required": where == "path"}
    if description is not None:
        out["description"] = description
    out["schema"] = schema
    return out


def json_body(schema: str, *, required: bool = False) -> dict[str, Any]:
    """A request body of the component schema ``schema``, as JSON."""
    return {"required": required, "content": {"application/json": {"schema": ref(schema)}}}


def answer(
    description: str,
    schema: str | dict[str, Any],
    *,
    media: str = "application/json",
    headers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An answer whose body is ``schema`` (a component's name, or a schema) as ``media``."""
    out: dict[str, Any] = {"description": description}
    if headers is not None:
        out["headers"] = headers
    out["content"] = {media: {"schema": ref(schema) if isinstance(schema, str) else schema}}
    return out


def problem(description: str, **headers: dict[str, Any]) -> dict[str, Any]:
    """An answer with a problem document, for the reason ``description`` gives."""
    out: dict[str, Any] = {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": ref("Problem")}},
    }
    if headers:
        out["headers"] = headers
    return out


def operation(
    operation_id: str,
    summary: str,
    responses: dict[str, Any],
    *,
    description: str | None = None,
    parameters: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    security: list[dict[str, list[str]]] = SECURED,
) -> dict[str, Any]:
    """An operation: by default one that takes the caller's credentials."""
    out: dict[str, Any] = {"operationId": operation_id, "summary": summary}
    if description is not None:
        out["description"] = description
    out["security"] = security
    if parameters is not None:
        out["parameters"] = parameters
    if body is not None:
        out["requestBody"] = body
    # The server's own answers to a request it cannot parse, on every path (see _serve.py).
    out["responses"] = dict(sorted({**UNPARSABLE, **responses}.items()))
    return out


#: What the server answers, on any path, to a request that is not valid HTTP/1.1 (a
#: malformed header, say) or whose headers are too large, before any operation sees it.
UNPARSABLE = {
    "400": problem("The request is not valid HTTP/1.1."),
    "431": problem("The request's headers are too large."),
}
RETRY_AFTER = {
    "description": "Seconds to wait before trying again.",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}
#: The header of a created (or found again) job's answer: the job's path.
LOCATION = {"Location": {"schema": {"type": "string"}}}
CROSS_SITE = problem("The browser says another site made the request (Sec-Fetch-Site).")
UNAUTHORIZED = problem(
    "Missing or invalid credentials.",
    **{"WWW-Authenticate": {"schema": {"type": "string"}}},
)
NOT_FOUND = problem("No such job for this caller (unknown, lapsed, or another caller's).")
UNAVAILABLE = problem("The service is shutting down or its store cannot be used.")
JOB_ID = param("id", "path", {"type": "string"}, "The job id returned by POST /v1/batches.")
#: The problems of an operation that reads an optional JSON body.
BODY_PROBLEMS = {
    "400": problem("The body is not JSON."),
    "403": CROSS_SITE,
    "408": problem("The body did not arrive in time (--body-timeout)."),
    "413": problem("The body is larger than the service accepts."),
    "415": problem("A Content-Type was sent and it is not JSON."),
}
