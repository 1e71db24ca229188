"""What an HTTP answer means for a fetch: status errors, ``Retry-After``, redirects, media type."""

from __future__ import annotations

import datetime
import email.utils
import time

import httpx

from ._errors import HTTPStatusError, RedirectError, URLError
from ._urls import check_http_url

__all__ = [
    "REDIRECT_CODES",
    "TRANSIENT",
    "conditional_headers",
    "decoded_headers",
    "parse_retry_after",
    "redirect_target",
    "split_content_type",
    "status_error",
    "status_error_of",
]

_HTTP_SCHEMES = ("http", "https")
REDIRECT_CODES = (301, 302, 303, 307, 308)


def redirect_target(response: httpx.Response, location: str) -> str:
    try:
        target = response.url.join(location)
    except httpx.InvalidURL as exc:
        raise RedirectError(
            f"{response.url} redirects to an invalid URL {location!r}: {exc}",
            hint="the server sent a broken Location header; report it to the site",
        ) from None
    if target.scheme not in _HTTP_SCHEMES:
        raise RedirectError(
            f"{response.url} redirects to {location!r}; only http and https redirects are followed",
            hint="redirects to other schemes (file:, ftp:, ...) are refused on purpose; "
            "fetch that URL directly if you trust it",
        )
    try:
        check_http_url(str(target))
    except URLError as exc:
        raise RedirectError(
            f"{response.url} redirects to an invalid URL {location!r}: {exc}",
            hint="the server sent a broken Location header; report it to the site",
        ) from None
    return str(target)


def status_error(response: httpx.Response) -> HTTPStatusError:
    """The error of an answer with a 4xx or 5xx status."""
    return status_error_of(
        response.status_code,
        response.reason_phrase,
        str(response.url),
        response.headers.get("retry-after"),
    )


def status_error_of(code: int, reason: str, url: str, retry_after: str | None) -> HTTPStatusError:
    """The error of a ``code`` answer from ``url`` (a kept one, too: see ``_recorded``)."""
    message = f"HTTP {code} {reason} from {url}".replace("  ", " ")
    if code in (401, 403):
        hint = "the server refused access; the page may need a login or block automated clients"
    elif code in (404, 410):
        hint = "the page does not exist (any more); check the URL"
    elif code == 429:
        hint = "the server is rate limiting; wait and submit the target again"
    elif code >= 500:
        hint = "the server failed; try again later"
    else:
        hint = "the server rejected the request; check the URL"
    return HTTPStatusError(
        message,
        status_code=code,
        hint=hint,
        retry_after=parse_retry_after(retry_after, now=time.time()),
    )


#: Connection failures that may not happen again a moment later.
TRANSIENT = (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date.

    Strict: delay-seconds are ASCII digits only; a date in the past means 0. Anything else
    (absent, malformed, absurd) gives None, and the retry policy's own delay applies.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value) if len(value) <= 12 else None  # past 30,000 years: nonsense
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; a zone-less one is taken as UTC
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


def split_content_type(header: str | None) -> tuple[str | None, str | None]:
    if not header:
        return None, None
    media, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip("\"'") or None
    return media.strip().lower() or None, charset


def conditional_headers(validators: tuple[str | None, str | None] | None) -> dict[str, str]:
    """The request headers that ask for a body only if it changed since ``validators``."""
    etag, last_modified = validators or (None, None)
    headers = {}
    if etag is not None:
        headers["If-None-Match"] = etag
    if last_modified is not None:
        headers["If-Modified-Since"] = last_modified
    return headers


def decoded_headers(response: httpx.Response) -> tuple[tuple[str, str], ...]:
    """The response's headers as they arrived (names' case kept), decoded as httpx does."""
    encoding = response.headers.encoding
    return tuple(
        (name.decode(encoding), value.decode(encoding)) for name, value in response.headers.raw
    )
