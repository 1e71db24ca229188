"""The errors the built-in fetchers raise, drawn in one place.

Every failure of :class:`~trio_batch.fetchers.HttpFetcher` is a :class:`FetchError` whose
``hint`` says what to do about it; the runner stores ``"ClassName: message"`` as the target's
error and the hint beside it. :class:`DestinationRefused` is the SSRF policy's refusal (see
:class:`~trio_batch.fetchers.DestinationPolicy`); it is not a :class:`FetchError`.

::

    FetchError
    ├── URLError
    ├── URLRefused
    ├── OptionError
    │   └── UnsupportedOption
    ├── NetworkError
    ├── FetchTimeout
    ├── HTTPStatusError
    ├── RedirectError
    ├── ResponseTooLarge
    ├── LocalFileError
    ├── RobotsDisallowed
    └── ContentError
        └── OutputTooLarge
    DestinationRefused
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "RETRYABLE_STATUSES",
    "ContentError",
    "DestinationRefused",
    "FetchError",
    "FetchTimeout",
    "HTTPStatusError",
    "LocalFileError",
    "NetworkError",
    "OptionError",
    "OutputTooLarge",
    "RedirectError",
    "ResponseTooLarge",
    "RobotsDisallowed",
    "URLError",
    "URLRefused",
    "UnsupportedOption",
]


class FetchError(Exception):
    """A target could not be fetched or processed; ``hint`` tells the user what to do.

    ``retryable`` is true when another attempt may succeed (a refused or reset connection, a
    timeout, a 408, 425, 429, 500, 502, 503 or 504 answer): the runner retries such a target
    under its :class:`~trio_batch.RetryPolicy`. ``retry_after`` is the server's ``Retry-After``
    in seconds, when it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str = "",
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.hint = hint
        self.retryable = retryable
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments (hint, status_code) are lost by Exception's own pickling;
        # body processing raises these in a worker process and they cross back pickled.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[FetchError], args: tuple[Any, ...], state: dict[str, Any]) -> FetchError:
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class URLError(FetchError):
    """The URL cannot be fetched by this fetcher: an unsupported scheme or a malformed URL."""


class URLRefused(FetchError):
    """A ``check_url`` hook refused a URL (raise it from your own hook)."""


class OptionError(FetchError):
    """An option has a bad value: an unknown mode, a bad regex, jq program or page range.

    ``option`` names the option at fault (``"grep"``, ``"pages"``, ...), when it is one.
    """

    def __init__(self, message: str, *, option: str | None = None, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.option = option


class UnsupportedOption(OptionError):
    """The target sets an option this fetcher does not support (``question``, ``recover``)."""


class NetworkError(FetchError):
    """The connection failed: refused, reset, a DNS or TLS error, a broken HTTP response."""


class FetchTimeout(FetchError):
    """The fetch took longer than the fetcher's timeout."""


class HTTPStatusError(FetchError):
    """The server answered with a 4xx or 5xx status; ``status_code`` holds it.

    Retryable for the statuses in :data:`RETRYABLE_STATUSES`; every other 4xx is final.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        hint: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(
            message,
            hint=hint,
            retryable=status_code in RETRYABLE_STATUSES,
            retry_after=retry_after,
        )
        self.status_code = status_code


#: Answers worth another attempt: timeouts, rate limits and the server's passing failures.
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class RedirectError(FetchError):
    """Too many redirects, or a redirect to a URL this fetcher will not follow."""


class ResponseTooLarge(FetchError):
    """The body is larger than the fetcher's ``max_bytes``."""


class RobotsDisallowed(FetchError):
    """The site's robots.txt disallows the URL (only with ``obey_robots``)."""


class LocalFileError(FetchError):
    """A ``file://`` URL names a file that cannot be read."""


class ContentError(FetchError):
    """The body cannot be processed as asked: not JSON for jq, not a readable PDF, binary."""


class OutputTooLarge(ContentError):
    """What processing made of the body is larger than the fetcher's ``max_output``."""


class DestinationRefused(Exception):
    """A URL's destination is not one the service may fetch; ``hint`` says what to do."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint
