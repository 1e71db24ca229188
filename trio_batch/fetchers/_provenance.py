"""Where a fetched body came from: the provenance every built-in fetch result carries in ``meta``.

What the result's ``meta`` says of the response, so that a run can be checked and repeated: the
final URL and the redirect chain, the status and content type, the validators (``ETag``,
``Last-Modified``) and the server's ``Date``, the body's size and sha256, when it was fetched
and by which version of the fetcher.
"""

from __future__ import annotations

from typing import Any

from .._version import __version__
from ._body import Body

__all__ = ["FETCHER", "header", "provenance"]

#: The fetcher's name and version, as ``meta["fetcher"]`` gives it.
FETCHER = f"trio-batch/{__version__}"

#: The response headers provenance keeps, and the ``meta`` key of each.
_KEPT = (("etag", "etag"), ("last-modified", "last_modified"), ("date", "date"))


def header(headers: tuple[tuple[str, str], ...], name: str) -> str | None:
    """The first value of the header ``name`` (lower case) in ``headers``, or None."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def provenance(body: Body, fetched_at: float) -> dict[str, Any]:
    """The ``meta`` of a result made of ``body``, fetched at ``fetched_at`` (epoch seconds).

    Keys: ``url`` (final), ``status_code``, ``content_type``, ``bytes``, ``sha256`` (of the
    body as processing got it, after content decoding), ``fetched_at``, ``fetcher``; with
    redirects ``redirects`` (how many) and ``redirect_chain`` (the URLs before ``url``); and
    ``etag``, ``last_modified``, ``date`` when the response had them.
    """
    meta: dict[str, Any] = {
        "url": body.url,
        "status_code": body.status_code,
        "content_type": body.content_type,
        "bytes": len(body.data),
        "sha256": body.sha256(),
        "fetched_at": fetched_at,
        "fetcher": FETCHER,
    }
    if body.redirects:
        meta["redirects"] = body.redirects
        meta["redirect_chain"] = list(body.chain)
    for name, key in _KEPT:
        value = header(body.headers, name)
        if value is not None:
            meta[key] = value
    return meta
