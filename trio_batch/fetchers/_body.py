"""Processing a fetched body into text: decoding, PDF pages, jq, HTML (``_markup``), grep.

Everything here is pure computation; :class:`~trio_batch.fetchers.HttpFetcher` runs
:func:`process_body` in a worker thread, off the event loop.

Processing order: body → PDF text or jq or HTML conversion → grep, capped at ``max_output``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from ._errors import ContentError, OptionError, OutputTooLarge
from ._markup import convert_html
from ._options import Plan, compile_jq, shown

__all__ = ["Body", "check_output_size", "grep_lines", "process_body"]

_HTML_TYPES = ("text/html", "application/xhtml+xml")


@dataclass(frozen=True, slots=True)
class Body:
    """A fetched body and what the response said about it, before any processing."""

    url: str
    status_code: int | None
    content_type: str | None  # media type only, lower case, no parameters
    charset: str | None
    data: bytes
    redirects: int
    #: Every URL requested before the final one, in order (empty without redirects).
    chain: tuple[str, ...] = ()
    #: The final response's headers as they arrived, in order (empty for ``file://``).
    headers: tuple[tuple[str, str], ...] = ()
    #: The final response's reason phrase and HTTP version (``HTTP/1.1``), when known.
    reason: str = ""
    http_version: str = ""
    #: The hex sha256 of ``data`` when the reader hashed it on the way ("": not yet).
    digest: str = ""

    def sha256(self) -> str:
        """The hex sha256 of ``data``: the reader's, or hashed now."""
        return self.digest or hashlib.sha256(self.data).hexdigest()


def process_body(
    plan: Plan, body: Body, context_lines: int, max_output: int
) -> tuple[str, dict[str, Any]]:
    """The text ``plan`` makes of ``body``, and the extra metadata it found (pages, matches).

    Raises :class:`OutputTooLarge` when the text is more than ``max_output`` bytes (UTF-8), a
    :class:`ContentError` when the document is nested too deeply to process (a
    ``RecursionError`` anywhere in processing), or another :class:`FetchError` saying why the
    body cannot be processed as asked.
    """
    try:
        text, extra = _process(plan, body, context_lines, max_output)
    except RecursionError:
        raise ContentError(
            f"{body.url} is nested too deeply to process",
            hint="the document nests arrays, objects or elements thousands deep; fetch it "
            "without processing (mode 'raw', no 'jq'), or fetch a flatter resource",
        ) from None
    check_output_size(text, max_output, body.url)
    return text, extra


def check_output_size(text: str, max_output: int, url: str) -> None:
    """Raise :class:`OutputTooLarge` if ``text`` is more than ``max_output`` bytes in UTF-8."""
    # Counting characters first: UTF-8 is one to four bytes a character.
    if len(text) > max_output or (
        len(text) * 4 > max_output and len(text.encode("utf-8", "surrogatepass")) > max_output
    ):
        raise _output_too_large(url, max_output)


def _output_too_large(url: str, max_output: int) -> OutputTooLarge:
    return OutputTooLarge(
        f"processing {url} made more than {max_output} bytes of output; nothing was stored",
        hint="keep less of the body (a grep pattern, a jq program that selects less, fewer "
        "pages), or raise the fetcher's max_output",
    )


def _process(
    plan: Plan, body: Body, context_lines: int, max_output: int
) -> tuple[str, dict[str, Any]]:
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
                option="pages",
                hint="drop 'pages' for this target",
            )
        text = _decode(body)
        if plan.jq:
            text = _run_jq(plan.jq, text, body.url, max_output)
        elif plan.html and _is_html(body.content_type, text):
            text = convert_html(plan.html, text, body.url)
    if plan.grep is not None:
        text, matches = grep_lines(plan.grep, text, context_lines if plan.context else 0)
        extra["matches"] = matches
    return text, extra


def _decode(body: Body) -> str:
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


def _run_jq(program: str, text: str, url: str, max_output: int) -> str:
    """The outputs of ``program`` on the JSON ``text``, one a line; stops past ``max_output``.

    jq parses the body itself (no Python objects for the input, and jq's own depth limit).
    """
    if not text.strip():
        raise _not_json(url, "the body is empty")
    lines: list[str] = []
    size = 0
    try:
        for out in compile_jq(program).input_text(text):
            line = out if isinstance(out, str) else _compact(out)
            size += len(line) + 1
            if size > max_output + 1:  # characters: each at least one byte
                raise _output_too_large(url, max_output)
            lines.append(line)
    except ValueError as exc:
        message = str(exc)
        if "Exceeds depth limit for parsing" in message:
            raise RecursionError from None  # reported as nested too deeply, as Python's own
        if message.startswith("parse error"):  # jq's words for a body that is not JSON
            raise _not_json(url, message) from None
        raise ContentError(
            f"jq program {shown(program)} failed on {url}: {message}",
            hint="check the program against the document's shape (jq '.' shows it all)",
        ) from None
    return "\n".join(lines)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _not_json(url: str, why: str) -> ContentError:
    return ContentError(
        f"jq needs a JSON body; {url} is not JSON ({why})",
        hint="drop 'jq' for this target, or check that the URL serves JSON",
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
