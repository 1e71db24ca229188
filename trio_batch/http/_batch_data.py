"""The routes on many targets or jobs at once: a job's results as JSONL, retrying its failed
or unfinished targets, and cancelling a caller's jobs by filter; and the filters themselves,
as ``GET /v1/batches`` and ``POST /v1/batches/cancel`` read them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import trio
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .._errors import BatchError, InvalidRequest, JobGone
from .._text import json_type, parse_count, unknown_keys
from ..runner import export_line
from ..store import JobFilter, parse_filter
from ._bodies import created, parse_json, read_body, require_json
from ._metrics import StreamCut
from ._problems import not_found, problem_for
from ._service import Service
from ._webhooks import parse_webhook

__all__ = [
    "FILTER_KEYS",
    "batch_data_routes",
    "filter_from_query",
    "filter_query",
    "parse_filter",
]

#: Most digits of results.jsonl's ``after`` (past any index a store holds: it reads as none).
AFTER_DIGITS = 10
#: The query keys of a filtered ``GET /v1/batches`` (beside ``limit`` and ``cursor``).
FILTER_KEYS = ("status", "label", "created_after")
#: Bytes of JSONL gathered before they are sent (one page of targets at most, usually).
_CHUNK = 64 * 1024


# ---------------------------------------------------------------------------------------------
# Filters


def filter_from_query(query: QueryParams) -> JobFilter:
    """The filter of a ``GET /v1/batches`` query (``status`` and ``label`` may repeat, a
    status may also be a comma-separated list)."""
    statuses = [s for value in query.getlist("status") for s in value.split(",")]
    return parse_filter(statuses, query.getlist("label"), query.get("created_after"))


def filter_query(where: JobFilter) -> str:
    """The query string (``&``-prefixed, or empty) that gives ``where`` back: what the next
    page's link carries."""
    pairs: list[tuple[str, str]] = [("status", s.value) for s in sorted(where.statuses)]
    pairs += [("label", f"{key}:{value}") for key, value in where.labels]
    if where.created_after is not None:
        pairs.append(("created_after", repr(where.created_after)))
    return "&" + urlencode(pairs) if pairs else ""


# ---------------------------------------------------------------------------------------------
# GET /v1/batches/{id}/results.jsonl

#: A line whose result holds more characters than this is encoded on a worker thread: a big
#: result (up to ``Config.max_result_size``) would stall every request beside it on the loop.
BIG_LINE = 64 * 1024


def encode_line(line: dict[str, Any]) -> str:
    """One export line as compact JSON (non-ASCII kept as it is)."""
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


async def results_jsonl(request: Request) -> Response:
    """GET /v1/batches/{id}/results.jsonl: every target, one JSON object a line, in order."""
    service = Service.of(request)
    caller = service.caller(request)
    query = request.query_params
    unknown = unknown_keys(dict(query), ("after", "merged"))
    if unknown:
        raise InvalidRequest(f"unknown query parameter(s) {unknown}; use after and merged")
    after = -1
    if "after" in query:
        asked = parse_count(query["after"], max_digits=AFTER_DIGITS)
        if asked is None:
            raise InvalidRequest("after must be a target index (a whole number)")
        after = asked
    merged = query.get("merged", "0")
    if merged not in ("0", "1", "true", "false"):
        raise InvalidRequest("merged must be 1 or 0")
    job = await service.owned_job(request, caller)
    runner = service.runner
    overlay = merged in ("1", "true")

    async def lines() -> AsyncIterator[bytes]:
        chunk: list[str] = []
        size = 0
        try:
            async for job_id, target in runner.export(job, after=after, merged=overlay):
                line = export_line(job_id, target, merged=overlay)
                result = line.get("result")
                if result is not None and len(result["content"]) > BIG_LINE:
                    text = await trio.to_thread.run_sync(encode_line, line)  # not on the loop
                else:
                    text = encode_line(line)
                chunk.append(text + "\n")
                size += len(text) + 1
                if size >= _CHUNK:
                    yield "".join(chunk).encode()
                    chunk, size = [], 0
        except JobGone as gone:  # deleted midway: the body must not end as if whole
            raise StreamCut(str(gone)) from None
        if chunk:
            yield "".join(chunk).encode()

    return StreamingResponse(
        lines(),
        media_type="application/jsonl",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


# ---------------------------------------------------------------------------------------------
# POST /v1/batches/{id}/retry and POST /v1/batches/cancel


async def _body_object(request: Request, service: Service) -> dict[str, Any]:
    require_json(request, body_expected=False)
    body = await read_body(request, service.max_body, seconds=service.body_timeout)
    if not body.strip():
        return {}
    obj = parse_json(body)
    if not isinstance(obj, dict):
        raise InvalidRequest(f"the body must be a JSON object, not {json_type(obj)}")
    return obj


async def retry_batch(request: Request) -> Response:
    """POST /v1/batches/{id}/retry: a new job of the ended job's failed (and, with
    ``"only": ["failed", "pending"]``, unfinished) targets; 201, or 200 for the same retry."""
    service = Service.of(request)
    caller = service.caller(request)
    obj = await _body_object(request, service)
    unknown = unknown_keys(obj, ("only", "webhook"))
    if unknown:
        raise InvalidRequest(
            f"unknown key(s) {unknown}; the body has optionally 'only' and 'webhook'"
        )
    # Without "webhook", the retry tells the ended job's webhook; null: none.
    webhook = parse_webhook(obj) if "webhook" in obj else ...
    only = obj.get("only", ["failed"])
    if not isinstance(only, list):
        raise InvalidRequest('only must be a list, e.g. ["failed", "pending"]')
    runner = service.runner
    try:
        found = await runner.retry(
            request.path_params["id"], only=only, caller=caller.name, webhook=webhook
        )
    except BatchError as exc:
        raise problem_for(exc, retry_after=service.retry_after) from None
    if found is None:
        raise not_found()  # another caller's job reads exactly like an unknown one
    return await created(runner, *found)


def _listed(obj: dict[str, Any], key: str) -> list[object]:
    value = obj.get(key, [])
    return value if isinstance(value, list) else [value]


async def cancel_matching(request: Request) -> Response:
    """POST /v1/batches/cancel: cancel the caller's live jobs that the body's filters list
    (``status``, ``label``, ``created_after``; at least one, or ``"all": true``); with
    ``"dry_run": true`` only count them."""
    service = Service.of(request)
    caller = service.caller(request)
    obj = await _body_object(request, service)
    unknown = unknown_keys(obj, (*FILTER_KEYS, "all", "dry_run"))
    if unknown:
        raise InvalidRequest(
            f"unknown key(s) {unknown}; the body has {', '.join(FILTER_KEYS)}, all and dry_run"
        )
    for flag in ("all", "dry_run"):
        if not isinstance(obj.get(flag, False), bool):
            raise InvalidRequest(f"{flag} must be true or false")
    where = parse_filter(_listed(obj, "status"), _listed(obj, "label"), obj.get("created_after"))
    if where == JobFilter() and not obj.get("all", False):
        # An empty filter cancels every live job the caller has: asked for by name only.
        raise InvalidRequest('give a filter (status, label, created_after) or "all": true')
    dry_run = bool(obj.get("dry_run", False))
    ids = await service.runner.cancel_matching(caller.name, where, dry_run=dry_run)
    return JSONResponse({"dry_run": dry_run, "count": len(ids), "ids": ids})


def batch_data_routes() -> list[Route]:
    """The routes of this module, for the application's table."""
    return [
        Route("/v1/batches/cancel", cancel_matching, methods=["POST"]),
        Route("/v1/batches/{id}/results.jsonl", results_jsonl, methods=["GET"]),
        Route("/v1/batches/{id}/retry", retry_batch, methods=["POST"]),
    ]
