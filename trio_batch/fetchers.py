"""Built-in fetch functions for the runner: :func:`http_fetch` and :class:`HttpFetcher`.

``http_fetch`` fetches ``http://``, ``https://`` and ``file://`` URLs and turns the body into
text according to the target's :class:`~trio_batch.Options`::

    async with open_runner(store, http_fetch) as runner:
        ...

It needs the ``cli`` extra (``pip install 'trio-batch[cli]'``): httpx for HTTP, beautifulsoup4
for ``mode: text``, jq for ``jq``, pypdf for PDF bodies. The heavier ones are imported only
when a target uses them.

Every failure raises a :class:`FetchError` subclass whose ``hint`` says what to do about it; the
runner stores ``"ClassName: message"`` as the target's error and the hint beside it.

Options
-------
``mode``
    ``raw`` (the default): the body decoded as text. ``text``: HTML turned into readable text
    (other bodies are left as they are).
``grep``
    A Python regular expression; only the lines that match are kept. With ``context: true`` the
    neighbouring lines are kept too, and groups that are not adjacent are separated by ``--``
    (as ``grep -C`` does).
``jq``
    A jq program run on a JSON body. Each output is one line: strings as they are, other values
    as compact JSON (``jq -r -c``).
``pages``
    For PDF bodies: which pages' text to keep, 1-based, e.g. ``1-3,5,8-``. A PDF body without
    ``pages`` gives the text of every page.
``question``, ``recover``
    Not supported by this fetcher; a target that sets them fails with a hint.

Processing order: body → PDF text or jq or HTML-to-text → grep.
"""

from __future__ import annotations

import functools
import json
import mimetypes
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit
from urllib.request import url2pathname

import httpx
import trio

from . import __version__
from ._model import Options, Result, Target

__all__ = [
    "CheckURL",
    "ContentError",
    "FetchError",
    "FetchTimeout",
    "HTTPStatusError",
    "HttpFetcher",
    "LocalFileError",
    "NetworkError",
    "OptionError",
    "RedirectError",
    "ResponseTooLarge",
    "URLError",
    "URLRefused",
    "UnsupportedOption",
    "http_fetch",
]

#: A hook called with every URL before it is requested: the first one and each redirect hop.
#: It returns to allow the request, or raises (ideally :class:`URLRefused`) to refuse it.
CheckURL = Callable[[str], Awaitable[None]]

_HTTP_SCHEMES = ("http", "https")
_REDIRECT_CODES = (301, 302, 303, 307, 308)
_HTML_TYPES = ("text/html", "application/xhtml+xml")


# --------------------------------------------------------------------------------------------
# Errors


class FetchError(Exception):
    """A target could not be fetched or processed; ``hint`` tells the user what to do."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


class URLError(FetchError):
    """The URL cannot be fetched by this fetcher: an unsupported scheme or a malformed URL."""


class URLRefused(FetchError):
    """A ``check_url`` hook refused a URL (raise it from your own hook)."""


class OptionError(FetchError):
    """An option has a bad value: an unknown mode, a bad regex, jq program or page range."""


class UnsupportedOption(OptionError):
    """The target sets an option this fetcher does not support (``question``, ``recover``)."""


class NetworkError(FetchError):
    """The connection failed: refused, reset, a DNS or TLS error, a broken HTTP response."""


class FetchTimeout(FetchError):
    """The fetch took longer than the fetcher's timeout."""


class HTTPStatusError(FetchError):
    """The server answered with a 4xx or 5xx status; ``status_code`` holds it."""

    def __init__(self, message: str, *, status_code: int, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.status_code = status_code


class RedirectError(FetchError):
    """Too many redirects, or a redirect to a URL this fetcher will not follow."""


class ResponseTooLarge(FetchError):
    """The body is larger than the fetcher's ``max_bytes``."""


class LocalFileError(FetchError):
    """A ``file://`` URL names a file that cannot be read."""


class ContentError(FetchError):
    """The body cannot be processed as asked: not JSON for jq, not a readable PDF, binary."""


# --------------------------------------------------------------------------------------------
# Options, checked before any I/O


@dataclass(frozen=True, slots=True)
class _Plan:
    """A target's options, validated and compiled."""

    html_to_text: bool
    grep: re.Pattern[str] | None
    context: bool
    jq: str
    pages: tuple[tuple[int, int | None], ...]  # 1-based, inclusive ranges; None: to the end

    @classmethod
    def from_options(cls, options: Options) -> _Plan:
        if options.question:
            raise UnsupportedOption(
                "option 'question' is not supported by http_fetch",
                hint="answering questions needs a fetch function with a model behind it; "
                "drop 'question' or pass your own fetch function to the runner",
            )
        if options.recover:
            raise UnsupportedOption(
                "option 'recover' is not supported by http_fetch",
                hint="drop 'recover', or pass a fetch function that implements it",
            )
        if options.mode not in ("", "raw", "text"):
            raise OptionError(
                f"unknown mode {options.mode!r}",
                hint="mode is 'raw' (the body as text, the default) or 'text' (HTML as "
                "readable text)",
            )
        if options.jq and options.mode == "text":
            raise OptionError(
                "options 'jq' and mode 'text' cannot be combined",
                hint="jq works on JSON bodies and mode 'text' on HTML; keep the one that fits",
            )
        if options.context and not options.grep:
            raise OptionError(
                "option 'context' needs 'grep'",
                hint="context keeps the lines around each grep match; set 'grep' or drop it",
            )
        pattern: re.Pattern[str] | None = None
        if options.grep:
            try:
                pattern = re.compile(options.grep)
            except re.error as exc:
                raise OptionError(
                    f"grep pattern {options.grep!r} is not a valid regular expression: {exc}",
                    hint="grep takes a Python regular expression (escape '(' '[' '.' and the "
                    "like with a backslash to match them literally)",
                ) from None
        if options.jq:
            _compile_jq(options.jq)
        return cls(
            html_to_text=options.mode == "text",
            grep=pattern,
            context=options.context,
            jq=options.jq,
            pages=_parse_pages(options.pages) if options.pages else (),
        )


def _compile_jq(program: str) -> Any:
    import jq

    try:
        return jq.compile(program)
    except ValueError as exc:
        raise OptionError(
            f"jq program {program!r} does not compile: {exc}",
            hint="check the jq syntax, e.g. '.items[] | .name'",
        ) from None


_PAGE_RANGE = re.compile(r"\s*(\d+)\s*(?:(-)\s*(\d+)?\s*)?")


def _parse_pages(spec: str) -> tuple[tuple[int, int | None], ...]:
    ranges: list[tuple[int, int | None]] = []
    for part in spec.split(","):
        m = _PAGE_RANGE.fullmatch(part)
        first = int(m.group(1)) if m else 0
        last = (int(m.group(3)) if m.group(3) else None) if m and m.group(2) else first
        if m is None or first < 1 or (last is not None and last < first):
            raise OptionError(
                f"pages {spec!r} is not a page range",
                hint="pages are 1-based, comma-separated numbers or ranges, e.g. '1-3,5,8-'",
            )
        ranges.append((first, last))
    return tuple(ranges)


# --------------------------------------------------------------------------------------------
# The fetcher


@dataclass(frozen=True, slots=True)
class _Body:
    url: str
    status_code: int | None
    content_type: str | None  # media type only, lower case, no parameters
    charset: str | None
    data: bytes
    redirects: int


class HttpFetcher:
    """A configurable fetch function for ``http://``, ``https://`` and ``file://`` URLs.

    An instance is a runner ``FetchFunc``: ``await fetcher(target)`` returns a
    :class:`~trio_batch.Result` or raises a :class:`FetchError`. :data:`http_fetch` is an
    instance with the defaults.

    - ``timeout``: seconds for the whole fetch of one target: every redirect hop and the
      complete body (a server that trickles bytes cannot hold a target forever).
    - ``connect_timeout``: seconds to open each connection.
    - ``max_bytes``: largest body, after content decoding; the body is streamed and the fetch
      stops as soon as it goes past (``ResponseTooLarge``).
    - ``max_redirects``: redirects followed per target. Redirects are followed only to
      ``http``/``https`` URLs, never to ``file:`` or any other scheme.
    - ``allow_file``: whether ``file://`` URLs may be fetched. A service that fetches URLs sent
      by others should pass False.
    - ``check_url``: an async hook called with each URL before it is requested (the first URL
      and every redirect hop, ``file://`` ones included); it raises (e.g. :class:`URLRefused`)
      to refuse. This is where a service plugs in an SSRF policy. Note that a policy which
      resolves host names itself should also pin the addresses it checked, for instance
      through ``transport``, or a DNS answer that changes between check and connect slips by.
    - ``transport``: an ``httpx.AsyncBaseTransport`` to send requests through (default: httpx's
      own connection pool with TLS verified against certifi's CA bundle).
    - ``context_lines``: how many lines either side of a match ``context: true`` keeps.
    - ``user_agent``: the ``User-Agent`` header.
    - ``trust_env``: honour ``HTTP(S)_PROXY``/``NO_PROXY`` and ``SSL_CERT_FILE`` as httpx does.

    Each call opens its own short-lived ``httpx.AsyncClient`` (the TLS context is built once
    per fetcher), so one fetcher may be used from any number of trio runs and tasks.
    CPU-heavy processing (HTML, PDF, jq, regex) runs in a worker thread, off the event loop.
    """

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        max_bytes: int = 10 * 1024 * 1024,
        max_redirects: int = 5,
        allow_file: bool = True,
        check_url: CheckURL | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        context_lines: int = 1,
        user_agent: str = f"trio-batch/{__version__}",
        trust_env: bool = True,
    ) -> None:
        if not timeout > 0 or not connect_timeout > 0:
            raise ValueError("timeout and connect_timeout must be positive")
        if max_bytes < 0 or max_redirects < 0 or context_lines < 0:
            raise ValueError("max_bytes, max_redirects and context_lines must not be negative")
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.allow_file = allow_file
        self.check_url = check_url
        self.transport = transport
        self.context_lines = context_lines
        self.user_agent = user_agent
        self.trust_env = trust_env

    def __repr__(self) -> str:
        return (
            f"HttpFetcher(timeout={self.timeout!r}, max_bytes={self.max_bytes!r}, "
            f"max_redirects={self.max_redirects!r}, allow_file={self.allow_file!r})"
        )

    async def __call__(self, target: Target) -> Result:
        """Fetch ``target`` and process its body as its options say."""
        plan = _Plan.from_options(target.options)
        body = await self._fetch_body(target.url)
        content, extra = await trio.to_thread.run_sync(
            functools.partial(_process, plan, body, self.context_lines),
            abandon_on_cancel=True,  # pure computation: nothing to clean up if we stop waiting
        )
        meta: dict[str, Any] = {
            "url": body.url,
            "status_code": body.status_code,
            "content_type": body.content_type,
            "bytes": len(body.data),
        }
        if body.redirects:
            meta["redirects"] = body.redirects
        meta.update(extra)
        return Result(content, meta)

    async def _fetch_body(self, url: str) -> _Body:
        """Fetch ``url`` within the fetcher's timeout; returns the raw body and its metadata."""
        parts = _split(url)
        scheme = parts.scheme.lower()
        with trio.move_on_after(self.timeout) as scope:
            if scheme in _HTTP_SCHEMES:
                _check_http_url(url)
                return await self._fetch_http(url)
            if scheme == "file" and self.allow_file:
                if self.check_url is not None:
                    await self.check_url(url)
                return await self._fetch_file(url)
            raise _unsupported_scheme(url, scheme, allow_file=self.allow_file)
        assert scope.cancelled_caught
        raise FetchTimeout(
            f"gave up on {url} after {self.timeout:g} s",
            hint="the server is slow or stalled; try again later or raise the fetcher's timeout",
        )

    @functools.cached_property
    def _ssl_context(self) -> ssl.SSLContext:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())

    async def _fetch_http(self, url: str) -> _Body:
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            follow_redirects=False,
            verify=self._ssl_context if self.transport is None else True,
            transport=self.transport,
            trust_env=self.trust_env,
            headers={"User-Agent": self.user_agent},
        )
        current = url
        try:
            async with client:
                for hop in range(self.max_redirects + 1):
                    if self.check_url is not None:
                        await self.check_url(current)
                    request = client.build_request("GET", current)
                    try:
                        response = await client.send(request, stream=True)
                    except httpx.InvalidURL as exc:
                        # httpx parses the Location of a redirect even when not following it.
                        raise RedirectError(
                            f"{current} redirects to an invalid URL: {exc}",
                            hint="the server sent a broken Location header; report it to the site",
                        ) from None
                    try:
                        location = response.headers.get("location")
                        if response.status_code in _REDIRECT_CODES and location is not None:
                            if hop == self.max_redirects:
                                raise RedirectError(
                                    f"more than {self.max_redirects} redirects, starting at {url}",
                                    hint="the URL may redirect in a loop; fetch the final URL "
                                    "directly or raise the fetcher's max_redirects",
                                )
                            current = _redirect_target(response, location)
                            continue
                        if response.status_code >= 400:
                            raise _status_error(response)
                        data = await self._read_capped(response)
                        content_type, charset = _split_content_type(
                            response.headers.get("content-type")
                        )
                        return _Body(
                            str(response.url),
                            response.status_code,
                            content_type,
                            charset,
                            data,
                            hop,
                        )
                    finally:
                        await response.aclose()
        except httpx.TimeoutException as exc:
            raise FetchTimeout(
                f"{type(exc).__name__} while fetching {current}",
                hint="the server is slow or unreachable; try again later or raise the "
                "fetcher's timeout",
            ) from None
        except httpx.InvalidURL as exc:
            raise URLError(
                f"{current!r} is not a valid URL: {exc}",
                hint="check the URL for typos and unescaped characters",
            ) from None
        except httpx.TransportError as exc:
            raise NetworkError(
                f"{type(exc).__name__} while fetching {current}: {exc or 'no details'}",
                hint="check the host name and that the server is up and reachable",
            ) from None
        except httpx.HTTPError as exc:  # pragma: no cover - httpx raises the ones above
            raise FetchError(f"{type(exc).__name__} while fetching {current}: {exc}") from None
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _read_capped(self, response: httpx.Response) -> bytes:
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            raise self._too_large(str(response.url), f"{int(length)} bytes")
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > self.max_bytes:
                raise self._too_large(str(response.url), f"more than {self.max_bytes} bytes")
        return bytes(data)

    def _too_large(self, url: str, size: str) -> ResponseTooLarge:
        return ResponseTooLarge(
            f"the body of {url} is {size}; the limit is {self.max_bytes} bytes",
            hint="fetch a smaller resource, or raise the fetcher's max_bytes",
        )

    async def _fetch_file(self, url: str) -> _Body:
        parts = _split(url)
        if parts.netloc not in ("", "localhost"):
            raise URLError(
                f"{url} names host {parts.netloc!r}; file URLs can only name local files",
                hint="write file:///absolute/path (three slashes)",
            )
        path = url2pathname(parts.path)
        try:
            data = await trio.to_thread.run_sync(_read_file, path, self.max_bytes)
        except FileNotFoundError:
            raise LocalFileError(
                f"no such file: {path}", hint="check the path; file URLs need an absolute path"
            ) from None
        except IsADirectoryError:
            raise LocalFileError(
                f"{path} is a directory", hint="name a file, not a directory"
            ) from None
        except OSError as exc:
            raise LocalFileError(
                f"cannot read {path}: {exc.strerror or exc}",
                hint="check the file's permissions",
            ) from None
        if data is None:
            raise self._too_large(url, f"more than {self.max_bytes} bytes")
        content_type, encoding = mimetypes.guess_type(path)
        if encoding is not None:  # x.json.gz is gzip data, not JSON
            content_type = "application/octet-stream"
        return _Body(url, None, content_type, None, data, 0)


def _read_file(path: str, max_bytes: int) -> bytes | None:
    """Read at most ``max_bytes`` of ``path``; None if the file is larger."""
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    return None if len(data) > max_bytes else data


def _split(url: str) -> SplitResult:
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise URLError(
            f"{url!r} is not a valid URL: {exc}",
            hint="check the URL for typos and unescaped characters",
        ) from None


def _check_http_url(url: str) -> None:
    """Refuse an http(s) URL without a host or with a port out of range, before any I/O."""
    parts = _split(url)
    try:
        parts.port  # noqa: B018 - raises ValueError when out of range
    except ValueError as exc:
        raise URLError(
            f"{url!r} is not a valid URL: {exc}", hint="ports go from 1 to 65535"
        ) from None
    if not parts.hostname:
        raise URLError(f"{url!r} has no host name", hint="write the URL as http://host/path")


def _unsupported_scheme(url: str, scheme: str, *, allow_file: bool) -> URLError:
    allowed = "http://, https:// and file://" if allow_file else "http:// and https://"
    if not scheme:
        return URLError(
            f"{url!r} has no scheme",
            hint=f"write the full URL, e.g. https://{url.lstrip('/')}",
        )
    if scheme == "file":
        return URLError(
            f"file URLs are not allowed here: {url}",
            hint="this fetcher was built with allow_file=False; fetch the file over http",
        )
    return URLError(
        f"scheme {scheme!r} is not supported: {url}",
        hint=f"this fetcher handles {allowed} URLs; pass your own fetch function to the runner "
        "for other schemes",
    )


def _redirect_target(response: httpx.Response, location: str) -> str:
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
    return str(target)


def _status_error(response: httpx.Response) -> HTTPStatusError:
    code = response.status_code
    message = f"HTTP {code} {response.reason_phrase} from {response.url}".replace("  ", " ")
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
    return HTTPStatusError(message, status_code=code, hint=hint)


def _split_content_type(header: str | None) -> tuple[str | None, str | None]:
    if not header:
        return None, None
    media, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip("\"'") or None
    return media.strip().lower() or None, charset


# --------------------------------------------------------------------------------------------
# Processing the body (runs in a worker thread)


def _process(plan: _Plan, body: _Body, context_lines: int) -> tuple[str, dict[str, Any]]:
    extra: dict[str, Any] = {}
    if body.content_type == "application/pdf" or body.data.startswith(b"%PDF-"):
        if plan.jq:
            raise ContentError(
                f"jq needs a JSON body; {body.url} is a PDF",
                hint="drop 'jq', or use 'pages' and 'grep' on PDFs",
            )
        text, total, chosen = _pdf_text(body.data, plan.pages)
        extra["pdf_pages"] = total
        if plan.pages:
            extra["pages"] = chosen
    else:
        if plan.pages:
            raise OptionError(
                f"option 'pages' applies to PDF bodies; {body.url} is "
                f"{body.content_type or 'not a PDF'}",
                hint="drop 'pages' for this target",
            )
        text = _decode(body)
        if plan.jq:
            text = _run_jq(plan.jq, text, body.url)
        elif plan.html_to_text and _is_html(body.content_type, text):
            text = html_to_text(text)
    if plan.grep is not None:
        text, matches = grep_lines(plan.grep, text, context_lines if plan.context else 0)
        extra["matches"] = matches
    return text, extra


def _decode(body: _Body) -> str:
    if body.charset:
        try:
            return body.data.decode(body.charset, errors="replace")
        except LookupError:
            pass  # an unknown charset name: fall back to UTF-8
    if b"\x00" in body.data[:8192]:
        raise ContentError(
            f"{body.url} is binary ({body.content_type or 'unknown type'}, "
            f"{len(body.data)} bytes), not text",
            hint="this fetcher stores text: fetch HTML, text, JSON or PDF resources",
        )
    return body.data.decode("utf-8", errors="replace")


def _is_html(content_type: str | None, text: str) -> bool:
    if content_type is not None:
        return content_type in _HTML_TYPES
    start = text.lstrip()[:15].lower()
    return start.startswith(("<!doctype html", "<html"))


def html_to_text(html: str) -> str:
    """Turn an HTML document into readable plain text: one line per block, no markup.

    Uses beautifulsoup4 with Python's own ``html.parser``: a pure-Python, MIT-licensed library
    maintained for two decades that copes with the broken HTML found in the wild, and needs no
    compiled parser. (html2text gives Markdown but is GPL-licensed; selectolax is faster but a
    compiled extension, and parsing speed is not what limits a fetcher.)

    Scripts, styles, the ``<head>``, other invisible elements and ``<nav>`` menus are dropped;
    each block element (paragraph, heading, list item, table row, ...) starts a new line, list
    items get a ``- `` prefix, whitespace within a line is collapsed and blank lines are
    removed, so the result reads well and greps line by line.
    """
    from bs4 import BeautifulSoup, Tag

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(_SKIPPED):
        tag.decompose()
    for tag in soup.find_all(True):
        if not isinstance(tag, Tag):  # pragma: no cover - find_all(True) yields tags
            continue
        if tag.name == "br":
            tag.replace_with("\n")
        elif tag.name in _BLOCKS:
            tag.insert_before("\n- " if tag.name == "li" else "\n")
            tag.insert_after("\n")
        elif tag.name in ("td", "th"):
            tag.insert_after(" ")
    lines = (" ".join(line.split()) for line in soup.get_text().splitlines())
    return "\n".join(line for line in lines if line and line != "-")


_SKIPPED = ["script", "style", "noscript", "template", "head", "svg", "iframe", "object", "nav"]
_BLOCKS = frozenset(
    [
        "address",
        "article",
        "aside",
        "blockquote",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tr",
        "ul",
    ]
)


def grep_lines(pattern: re.Pattern[str], text: str, context: int = 0) -> tuple[str, int]:
    """Keep the lines of ``text`` that ``pattern`` matches, and ``context`` lines either side.

    Returns the kept text and the number of matching lines. With context, as with ``grep -C``,
    groups of lines that are not adjacent are separated by a ``--`` line.
    """
    lines = text.splitlines()
    hits = [i for i, line in enumerate(lines) if pattern.search(line)]
    keep: list[int] = []
    for i in hits:
        for j in range(max(0, i - context), min(len(lines), i + context + 1)):
            if not keep or j > keep[-1]:
                keep.append(j)
    out: list[str] = []
    for n, j in enumerate(keep):
        if context and n and j != keep[n - 1] + 1:
            out.append("--")
        out.append(lines[j])
    return "\n".join(out), len(hits)


def _run_jq(program: str, text: str, url: str) -> str:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ContentError(
            f"jq needs a JSON body; {url} is not JSON ({exc})",
            hint="drop 'jq' for this target, or check that the URL serves JSON",
        ) from None
    try:
        outputs = _compile_jq(program).input_value(value).all()
    except ValueError as exc:
        raise ContentError(
            f"jq program {program!r} failed on {url}: {exc}",
            hint="check the program against the document's shape (jq '.' shows it all)",
        ) from None
    return "\n".join(
        out if isinstance(out, str) else json.dumps(out, ensure_ascii=False, separators=(",", ":"))
        for out in outputs
    )


def _pdf_text(
    data: bytes, ranges: tuple[tuple[int, int | None], ...]
) -> tuple[str, int, list[int]]:
    """The text of the chosen pages (all if ``ranges`` is empty), the page count, the pages.

    Uses pypdf: pure Python, BSD-licensed, actively maintained and enough for text extraction.
    """
    import io

    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        total = len(reader.pages)
        chosen: list[int] = []
        for first, last in ranges or ((1, None),):
            end = total if last is None else last
            if first > total or end > total:
                raise OptionError(
                    f"pages {first}-{end} go past the end: the PDF has {total} page(s)",
                    hint=f"choose pages between 1 and {total}",
                )
            chosen.extend(range(first, end + 1))
        text = "\n\n".join(reader.pages[p - 1].extract_text() for p in chosen)
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ContentError(
            f"cannot read the PDF: {type(exc).__name__}: {exc}",
            hint="the file may be damaged or encrypted; open it in a PDF viewer to check",
        ) from None
    return text, total, chosen


#: The default fetcher: ``HttpFetcher()`` with its default limits (30 s, 10 MiB, 5 redirects).
http_fetch = HttpFetcher()
