"""The URL checks and refusals the built-in fetcher makes before any I/O."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from ._errors import ResponseTooLarge, URLError

__all__ = ["check_http_url", "response_too_large", "split_url", "unsupported_scheme"]


def split_url(url: str) -> SplitResult:
    """``urlsplit(url)``, with a malformed URL refused as :class:`URLError`."""
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise URLError(
            f"{url!r} is not a valid URL: {exc}",
            hint="check the URL for typos and unescaped characters",
        ) from None


def check_http_url(url: str) -> None:
    """Refuse an http(s) URL without a host or with a port out of range, before any I/O."""
    parts = split_url(url)
    try:
        parts.port  # noqa: B018 - raises ValueError when out of range
    except ValueError as exc:
        raise URLError(
            f"{url!r} is not a valid URL: {exc}", hint="ports go from 1 to 65535"
        ) from None
    if not parts.hostname:
        raise URLError(f"{url!r} has no host name", hint="write the URL as http://host/path")


def unsupported_scheme(url: str, scheme: str, *, allow_file: bool) -> URLError:
    """The error for a URL whose scheme this fetcher does not fetch, saying which it does."""
    allowed = "http://, https:// and file://" if allow_file else "http:// and https://"
    if not scheme:
        return URLError(
            f"{url!r} has no scheme",
            hint=f"write the full URL, e.g. https://{url.lstrip('/')}",
        )
    if scheme == "file":
        return URLError(
            f"file URLs are not allowed here: {url}",
            hint="this fetcher was built with allow_file=False (trio-batch serve refuses file "
            "URLs unless started with --allow-file); fetch the file over http",
        )
    return URLError(
        f"scheme {scheme!r} is not supported: {url}",
        hint=f"this fetcher handles {allowed} URLs; pass your own fetch function to the runner "
        "for other schemes",
    )


def response_too_large(url: str, size: str, max_bytes: int) -> ResponseTooLarge:
    """The error for a body of ``size`` (as said to a person) over the ``max_bytes`` limit."""
    return ResponseTooLarge(
        f"the body of {url} is {size}; the limit is {max_bytes} bytes",
        hint="fetch a smaller resource, or raise the fetcher's max_bytes",
    )
