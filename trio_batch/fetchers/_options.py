"""A target's options, checked and compiled before any I/O: at submit and again at fetch."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from .._model import Options, Target
from .._text import safe_text
from ._errors import OptionError, UnsupportedOption

__all__ = ["HTML_MODES", "MODES", "Plan", "check_target", "compile_jq", "plan_for", "shown"]

#: The modes that turn HTML into something else; other bodies are left as they are.
HTML_MODES = ("text", "markdown", "main")
#: Every mode: "" and "raw" keep the body as text.
MODES = ("", "raw", *HTML_MODES)


@dataclass(frozen=True, slots=True)
class Plan:
    """A target's options, validated and compiled."""

    html: str  # "" (the body as it is), "text", "markdown" or "main": what to make of HTML
    grep: re.Pattern[str] | None
    context: bool
    jq: str
    pages: tuple[tuple[int, int | None], ...]  # 1-based, inclusive ranges; None: to the end

    @classmethod
    def from_options(cls, options: Options) -> Plan:
        """Check and compile ``options``; raises :class:`OptionError` for a bad one."""
        if options.question:
            raise UnsupportedOption(
                "option 'question' is not supported by http_fetch",
                option="question",
                hint="answering questions needs a fetch function with a model behind it; "
                "drop 'question' or pass your own fetch function to the runner",
            )
        if options.recover:
            raise UnsupportedOption(
                "option 'recover' is not supported by http_fetch",
                option="recover",
                hint="drop 'recover', or pass a fetch function that implements it",
            )
        if options.mode not in MODES:
            raise OptionError(
                f"unknown mode {shown(options.mode)}",
                option="mode",
                hint="mode is 'raw' (the body as text, the default), 'text' (HTML as readable "
                "text), 'markdown' (HTML as Markdown) or 'main' (the page's main content as "
                "Markdown, without navigation and boilerplate)",
            )
        if options.jq and options.mode in HTML_MODES:
            raise OptionError(
                f"options 'jq' and mode {options.mode!r} cannot be combined",
                option="jq",
                hint=f"jq works on JSON bodies and mode {options.mode!r} on HTML; keep the one "
                "that fits",
            )
        if options.context and not options.grep:
            raise OptionError(
                "option 'context' needs 'grep'",
                option="context",
                hint="context keeps the lines around each grep match; set 'grep' or drop it",
            )
        pattern: re.Pattern[str] | None = None
        if options.grep:
            try:
                pattern = re.compile(options.grep)
            except re.error as exc:
                raise OptionError(
                    f"grep pattern {shown(options.grep)} is not a valid regular expression: {exc}",
                    option="grep",
                    hint="grep takes a Python regular expression (escape '(' '[' '.' and the "
                    "like with a backslash to match them literally)",
                ) from None
        if options.jq:
            compile_jq(options.jq)
        return cls(
            html=options.mode if options.mode in HTML_MODES else "",
            grep=pattern,
            context=options.context,
            jq=options.jq,
            pages=_parse_pages(options.pages) if options.pages else (),
        )


@functools.lru_cache(maxsize=256)
def plan_for(options: Options) -> Plan:
    """:meth:`Plan.from_options`, remembered: a job's targets mostly share their options."""
    return Plan.from_options(options)


def check_target(target: Target) -> None:
    """The fetcher's submit-time hook: raises :class:`OptionError` if ``target``'s options are
    bad (an unknown mode, a regex or jq program that does not compile, a bad page range)."""
    plan_for(target.options)


def compile_jq(program: str) -> Any:
    """``program`` compiled by jq; raises :class:`OptionError` if it does not compile."""
    import jq

    try:
        return jq.compile(program)
    except ValueError as exc:
        raise OptionError(
            f"jq program {shown(program)} does not compile: {exc}",
            option="jq",
            hint="check the jq syntax, e.g. '.items[] | .name'",
        ) from None


# ASCII digits only: \d alone also matches other scripts' digits, which int() reads. At most
# nine: int() refuses a string of thousands of digits with a ValueError that names no option.
_PAGE_RANGE = re.compile(r"\s*(\d{1,9})\s*(?:(-)\s*(\d{1,9})?\s*)?", re.ASCII)
_PAGES_HINT = "pages are 1-based, comma-separated numbers or ranges, e.g. '1-3,5,8-'"


def _parse_pages(spec: str) -> tuple[tuple[int, int | None], ...]:
    ranges: list[tuple[int, int | None]] = []
    for part in spec.split(","):
        m = _PAGE_RANGE.fullmatch(part)
        if m is None:
            raise _bad_pages(f"pages {shown(spec)} is not a page range (at {shown(part.strip())})")
        first = int(m.group(1))
        last = (int(m.group(3)) if m.group(3) else None) if m.group(2) else first
        if first < 1:
            raise _bad_pages(f"pages {shown(spec)} names page 0; pages count from 1")
        if last is not None and last < first:
            raise _bad_pages(f"pages {shown(spec)} has a backwards range {first}-{last}")
        ranges.append((first, last))
    return tuple(ranges)


def _bad_pages(message: str) -> OptionError:
    return OptionError(message, option="pages", hint=_PAGES_HINT)


def shown(value: str) -> str:
    """``value`` quoted for a message, cut short: an option may be thousands of characters."""
    return safe_text(repr(value), 80)
