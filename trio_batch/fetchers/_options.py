"""A target's options, checked and compiled before any I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .._model import Options
from ._errors import OptionError, UnsupportedOption

__all__ = ["Plan", "compile_jq"]


@dataclass(frozen=True, slots=True)
class Plan:
    """A target's options, validated and compiled."""

    html_to_text: bool
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
            compile_jq(options.jq)
        return cls(
            html_to_text=options.mode == "text",
            grep=pattern,
            context=options.context,
            jq=options.jq,
            pages=_parse_pages(options.pages) if options.pages else (),
        )


def compile_jq(program: str) -> Any:
    """``program`` compiled by jq; raises :class:`OptionError` if it does not compile."""
    import jq

    try:
        return jq.compile(program)
    except ValueError as exc:
        raise OptionError(
            f"jq program {program!r} does not compile: {exc}",
            hint="check the jq syntax, e.g. '.items[] | .name'",
        ) from None


# ASCII digits only: \d alone also matches other scripts' digits, which int() reads.
_PAGE_RANGE = re.compile(r"\s*(\d+)\s*(?:(-)\s*(\d+)?\s*)?", re.ASCII)


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
