"""The JSON the service reads and writes: submissions in, jobs and their counts out."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._config import Config
from .._errors import InvalidRequest, InvalidTargets, TooManyTargets
from .._json import STRICT_JSON, compact_json
from .._model import (
    Job,
    Target,
    TargetState,
    TargetStatus,
    check_caller,
    check_metadata,
    is_job_id,
)
from .._text import parse_count, parse_decimal, unknown_keys
from ..runner import Runner
from ._auth import DEFAULT_CALLER_CLASS, Caller
from ._problems import Problem, not_found

__all__ = [
    "DEFAULT_PAGE",
    "MAX_PAGE",
    "created",
    "job_json",
    "page_json",
    "parse_json",
    "parse_page",
    "parse_submission",
    "read_body",
    "require_json",
    "target_json_chunks",
    "target_summary_json",
]

#: Jobs per page of ``GET /v1/batches`` unless ``limit`` says otherwise, and the most allowed.
DEFAULT_PAGE = 20
MAX_PAGE = 100


def _counts(job: Job, targets: Sequence[TargetStatus] | None) -> dict[str, int]:
    counts = dict.fromkeys((str(s) for s in TargetState), 0)
    if targets is not None:
        for t in targets:
            counts[str(t.status)] += 1
        return counts
    counts["done"] = job.targets_succeeded
    counts["failed"] = job.targets_failed
    left = job.targets_unfinished
    if job.status.is_live and left > 0:
        counts["running"], counts["pending"] = 1, left - 1
    else:
        counts["pending"] = left
    return counts


def job_json(job: Job, targets: Sequence[TargetStatus] | None = None) -> dict[str, Any]:
    """The job as JSON with its counts per target status (from ``targets`` when given)."""
    out = job.to_json()
    out["counts"] = _counts(job, targets)
    return out


async def created(runner: Runner, job_id: str, reused: bool) -> Response:
    """The answer to a submit or a retry that made job ``job_id`` (201) or found it again
    (200): the job with its counts, from its statuses only (a reused job's results may be
    megabytes each)."""
    found = await runner.overview(job_id)
    if found is None:
        raise not_found("the job lapsed as soon as it was created")
    job, stored, _ = found
    return JSONResponse(
        {**job_json(job, stored), "reused": reused},
        status_code=200 if reused else 201,
        headers={"Location": f"/v1/batches/{job_id}"},
    )


def target_summary_json(job_id: str, target: TargetStatus, size: int) -> dict[str, Any]:
    """A target in the job view: its status and outcome without the result's content, the
    stored result's size (characters of its compact JSON, content and meta together), and
    where to read the result (None without one)."""
    out = target.to_json()
    del out["result"]
    out["result_size"] = size
    out["result_url"] = f"/v1/batches/{job_id}/targets/{target.idx}" if size else None
    return out


#: Characters of a result's content encoded at once when a target is sent in pieces.
CONTENT_CHUNK = 1024 * 1024


def target_json_chunks(target: TargetStatus, chunk: int = CONTENT_CHUNK) -> Iterator[bytes]:
    """``target.to_json()`` as compact JSON in pieces of about ``chunk`` characters: a big
    result is encoded a slice of its content at a time, so no piece costs more than that to
    make or holds more than that in memory besides the content itself."""
    out = target.to_json()
    result = out["result"]
    if result is None or len(result["content"]) <= chunk:
        yield compact_json(out).encode()
        return
    before = {k: out[k] for k in list(out)[: list(out).index("result")]}
    after = {k: out[k] for k in list(out)[list(out).index("result") + 1 :]}
    yield (compact_json(before)[:-1] + ',"result":{"content":"').encode()
    content: str = result["content"]
    for start in range(0, len(content), chunk):
        # A slice's JSON is its characters' escapes: the slices' together are the whole's.
        yield encode_basestring(content[start : start + chunk])[1:-1].encode()
    tail = compact_json(after)
    yield ('","meta":' + compact_json(result["meta"]) + "}," + tail[1:]).encode()


def parse_page(
    query: Mapping[str, str], filters: Sequence[str] = ()
) -> tuple[int, tuple[float, str] | None]:
    """``limit`` and ``cursor`` of a ``GET /v1/batches`` query, whose other keys may be only
    ``filters``; raises InvalidRequest (422)."""
    unknown = unknown_keys(dict(query), ("limit", "cursor", *filters))
    if unknown:
        known = ", ".join(("limit", "cursor", *filters))
        raise InvalidRequest(f"unknown query parameter(s) {unknown}; use {known}")
    limit = DEFAULT_PAGE
    if "limit" in query:
        asked = parse_count(query["limit"], max_digits=3)
        if asked is None or not 1 <= asked <= MAX_PAGE:
            raise InvalidRequest(f"limit must be a whole number from 1 to {MAX_PAGE}")
        limit = asked
    if "cursor" not in query:
        return limit, None
    when, _, job_id = query["cursor"].partition("~")
    # A job's creation time, which no float past the largest is: 1e400 read as infinity.
    created = parse_decimal(when)
    if created is None or not is_job_id(job_id):
        raise InvalidRequest("cursor is not one this service gave; pass the 'next' link as is")
    return limit, (created, job_id)


def page_json(jobs: Sequence[Job], limit: int, query: str = "") -> dict[str, Any]:
    """A page of jobs, and the link to the next page (None after the last one), which
    carries ``query`` (the filters, ``&``-prefixed and encoded) on."""
    next_link = None
    if len(jobs) == limit:
        last = jobs[-1]
        next_link = f"/v1/batches?limit={limit}&cursor={last.created_at!r}~{last.id}{query}"
    return {"jobs": [job_json(job) for job in jobs], "next": next_link}


def parse_json(body: bytes) -> object:
    """The JSON value of a request body; raises a 400 problem if it is not strict JSON."""

    try:
        return STRICT_JSON.decode(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise Problem(
            400, "malformed-json", "Malformed JSON", "the body is not JSON: it is not UTF-8"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise Problem(
            400, "malformed-json", "Malformed JSON", f"the body is not JSON: {exc}"
        ) from None


def require_json(request: Request, *, body_expected: bool = True) -> None:
    """Refuse (415) a request whose ``Content-Type`` is not JSON.

    A form or ``text/plain`` POST is what a browser may send cross-site without a preflight;
    behind a cookie-authenticated gateway (``--caller-header``) accepting it would let any web
    page submit or cancel jobs as the user. Without ``body_expected`` a missing type is allowed
    (``POST .../cancel`` has no body), a non-JSON one is not.
    """
    header = request.headers.get("content-type")
    if header is None and not body_expected:
        return
    media = (header or "").partition(";")[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    raise Problem(
        415,
        "unsupported-media-type",
        "Unsupported media type",
        f"send the body as JSON with 'Content-Type: application/json', not {header or 'none'!r}",
    )


def parse_submission(
    obj: object, caller: Caller, config: Config
) -> tuple[str, list[Target], dict[str, str]]:
    """The caller class, targets and metadata of a ``POST /v1/batches`` body; raises
    BatchError."""
    if not isinstance(obj, dict):
        raise InvalidRequest('the body must be a JSON object {"targets": [...]}')
    known = ("targets", "caller_class", "metadata", "webhook", "snapshot", "replay")
    unknown = unknown_keys(obj, known)
    if unknown:
        raise InvalidRequest(
            f"unknown key(s) {unknown}; the body has 'targets' and optionally 'caller_class', "
            "'metadata', 'webhook', 'snapshot' and 'replay'"
        )
    metadata = check_metadata(obj.get("metadata"))
    if "targets" not in obj:
        raise InvalidRequest("the body needs 'targets', a list of {\"url\": ...} objects")
    caller_class = caller.caller_class
    if "caller_class" in obj:
        asked = check_caller(obj["caller_class"], "caller_class")
        if not caller_class:
            caller_class = asked
        elif asked != caller_class:
            raise Problem(
                403,
                "forbidden-caller-class",
                "Forbidden",
                f"these credentials submit as caller class {caller_class!r}, not {asked!r}",
            )
    raw = obj["targets"]
    if not isinstance(raw, list):
        raise InvalidTargets("'targets' must be a JSON array of targets")
    caller_class = caller_class or DEFAULT_CALLER_CLASS
    limit, _ = config.limits_for(caller_class)
    if len(raw) > limit:  # before parsing every target of a huge list
        raise TooManyTargets(f"the job has {len(raw)} targets; the limit is {limit} per job")
    targets: list[Target] = []
    for i, item in enumerate(raw):
        try:
            targets.append(Target.from_json(item))
        except InvalidTargets as exc:
            raise InvalidTargets(f"target {i}: {exc}", index=i) from None
    return caller_class, targets, metadata


async def read_body(request: Request, limit: int, *, seconds: float) -> bytes:
    """The request's body; raises a 413 problem as soon as it goes past ``limit`` bytes, and a
    408 problem if it has not all arrived within ``seconds`` (a client trickling its body
    would otherwise hold the connection as long as it likes)."""
    too_large = Problem(
        413, "body-too-large", "Content too large", f"the body is larger than {limit} bytes"
    )
    length = parse_count(request.headers.get("content-length", ""), max_digits=30)
    if length is not None and length > limit:
        raise too_large
    body = bytearray()
    with trio.move_on_after(seconds):
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise too_large
        return bytes(body)
    raise Problem(
        408,
        "body-timeout",
        "Request timeout",
        f"the body did not arrive within {seconds:g} s; send it at once",
        headers={"Connection": "close"},
    )
