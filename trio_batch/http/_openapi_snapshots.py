"""The OpenAPI parts of snapshots and replay: the submit's ``snapshot`` and ``replay``, the
provenance the built-in fetcher puts in a result's ``meta``, and the pin and WARC paths."""

from __future__ import annotations

from typing import Any

from ._openapi_parts import (
    BODY_PROBLEMS,
    CROSS_SITE,
    JOB_ID,
    UNAUTHORIZED,
    UNAVAILABLE,
    answer,
    json_body,
    obj,
    operation,
    problem,
)

__all__ = ["FETCH_META", "SUBMIT_PROPERTIES", "snapshot_paths", "snapshot_schemas"]

_JOB_ID_STRING = {"type": "string", "pattern": "^[A-Za-z0-9_-]{22}$"}

#: What ``POST /v1/batches`` takes beside its targets.
SUBMIT_PROPERTIES: dict[str, Any] = {
    "snapshot": {
        "type": "boolean",
        "description": "Keep every target's raw response (status, headers, body) so that the "
        "job can be replayed; sets each target's `snapshot` option.",
    },
    "replay": {"$ref": "#/components/schemas/ReplayRequest"},
}

#: A result's ``meta`` as the built-in fetcher writes it (another fetch function writes its own).
FETCH_META: dict[str, Any] = {
    "type": "object",
    "description": "Free-form; the built-in fetcher's provenance keys are listed.",
    "properties": {
        "url": {"type": "string", "description": "The final URL, after redirects."},
        "redirects": {"type": "integer", "minimum": 1},
        "redirect_chain": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The URLs requested before `url`, in order.",
        },
        "status_code": {"type": ["integer", "null"]},
        "content_type": {"type": ["string", "null"]},
        "etag": {"type": "string"},
        "last_modified": {"type": "string"},
        "date": {"type": "string", "description": "The response's Date header."},
        "bytes": {"type": "integer", "minimum": 0},
        "sha256": {"type": "string", "description": "Hex sha256 of the body as fetched."},
        "fetched_at": {"type": "number", "description": "Unix time the body was fetched."},
        "fetcher": {"type": "string", "description": "The fetcher and its version."},
        "replayed": {
            "type": "boolean",
            "description": "True if the body came from a snapshot, not the network.",
        },
        "replay": {**_JOB_ID_STRING, "description": "The job whose snapshot was replayed."},
        "replay_miss": {
            **_JOB_ID_STRING,
            "description": "Not in that job's snapshot: fetched (on_miss: fetch).",
        },
        "revalidated": {"type": "string", "enum": ["not_modified", "modified"]},
    },
}


def snapshot_schemas() -> dict[str, Any]:
    """The component schemas these parts add."""
    return {
        "ReplayRequest": obj(
            {
                "job": _JOB_ID_STRING,
                "on_miss": {
                    "type": "string",
                    "enum": ["", "fail", "fetch"],
                    "description": "A target missing from the snapshot fails (the default) "
                    "or is fetched.",
                },
                "revalidate": {
                    "type": "boolean",
                    "description": "Ask the server with the snapshot's validators; a 304 "
                    "reuses the kept bytes.",
                },
            },
            optional=("on_miss", "revalidate"),
            description="Take each target's response from this job's snapshot, never the "
            "network. The job must be the caller's own (its lease not lapsed), or pinned and "
            "shared; otherwise 422, as for an unknown job.",
            closed=True,
        ),
        "PinRequest": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"shared": {"type": "boolean"}},
        },
        "Pinned": obj(
            {
                "job": {"type": "string"},
                "pinned": {"type": "boolean"},
                "shared": {"type": "boolean"},
            }
        ),
    }


def snapshot_paths() -> dict[str, Any]:
    """The paths these parts add."""
    no_snapshot = problem("No such job for this caller, or it has no snapshot.")
    common = {
        "401": UNAUTHORIZED,
        "403": CROSS_SITE,
        "404": no_snapshot,
        "409": problem("The service keeps no snapshots."),
        "503": UNAVAILABLE,
    }
    return {
        "/v1/batches/{id}/pin": {
            "post": operation(
                "pinSnapshot",
                "Keep the job's snapshot past its lease; shared: any caller may replay it.",
                {
                    "200": answer("The snapshot is pinned.", "Pinned"),
                    **{k: v for k, v in BODY_PROBLEMS.items() if k != "403"},
                    "422": problem('The body is not {"shared": true|false}.'),
                    **common,
                },
                parameters=[JOB_ID],
                body=json_body("PinRequest"),
            ),
            "delete": operation(
                "unpinSnapshot",
                "Let the job's snapshot go with the job's lease.",
                {"204": {"description": "Unpinned."}, **common},
                parameters=[JOB_ID],
            ),
        },
        "/v1/batches/{id}/snapshot.warc.gz": {
            "get": operation(
                "snapshotWarc",
                "The job's snapshot as WARC/1.1 (gzip per record), streamed: a request and a "
                "response record per kept response; payload digests are the sha256 in each "
                "result's meta.",
                {
                    "200": answer(
                        "The WARC file.",
                        {"type": "string", "contentEncoding": "binary"},
                        media="application/gzip",
                    ),
                    "401": UNAUTHORIZED,
                    "404": no_snapshot,
                    "500": problem(
                        "A response body of the snapshot is gone from the service's snapshot "
                        "directory (changed by hand or damaged): ``snapshot-damaged``."
                    ),
                    "501": problem("The service has no warc extra installed."),
                    "503": UNAVAILABLE,
                },
                parameters=[JOB_ID],
            )
        },
    }
