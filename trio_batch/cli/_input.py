"""Reading a batch file for ``trio-batch run``: JSON array, JSON Lines or plain URL lines.

Every target remembers the line it started on, so a bad one is reported as ``FILE:LINE``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .._errors import InvalidTargets
from .._json import STRICT_JSON
from .._model import Target

__all__ = ["InputError", "parse_targets"]


class InputError(ValueError):
    """A batch file that cannot be read as targets; ``line`` is 1-based, when known."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True, slots=True)
class _Item:
    line: int
    value: object  # a decoded JSON value, or a URL string from a plain line
    plain: bool


def parse_targets(text: str) -> tuple[list[Target], list[int]]:
    """Parse a batch file; returns the targets and the line each one starts on.

    The format is told from the content:

    - a file whose first non-blank character is ``[`` is a JSON array of target objects
      ``{"url": ..., "options": {...}, "custom_id": ...}``;
    - otherwise each non-blank line that does not start with ``#`` is one target: a JSON
      object if it starts with ``{`` (JSON Lines), else a bare URL. The two may be mixed.

    Raises :class:`InputError` naming the offending line: malformed JSON, a bad target or
    option, a URL with spaces, a repeated target or custom id, or no target at all.
    """
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark left by some editors
    stripped = text.lstrip()
    items = _json_array(text) if stripped.startswith("[") else _lines(text)
    if not items:
        raise InputError("the file holds no targets")
    targets: list[Target] = []
    lines: list[int] = []
    seen: dict[Target, int] = {}
    custom_ids: dict[str, int] = {}
    for item in items:
        try:
            if item.plain:
                assert isinstance(item.value, str)
                target = Target(item.value)
            else:
                target = Target.from_json(item.value)
        except InvalidTargets as exc:
            raise InputError(str(exc), line=item.line) from None
        first = seen.setdefault(target, item.line)
        if first != item.line:
            raise InputError(
                f"repeats the target on line {first} ({target.url}); a job's targets are distinct",
                line=item.line,
            )
        if target.custom_id is not None:
            first = custom_ids.setdefault(target.custom_id, item.line)
            if first != item.line:
                raise InputError(
                    f"repeats the custom_id {target.custom_id!r} of line {first}; custom ids "
                    "are unique within a job",
                    line=item.line,
                )
        targets.append(target)
        lines.append(item.line)
    return targets, lines


#: Where a line ends: what universal newlines read as one (``\r\n``, ``\r``, ``\n``).
_LINE_END = re.compile(r"\r\n?|\n")


def _lines(text: str) -> list[_Item]:
    items: list[_Item] = []
    # Not str.splitlines: it also breaks at U+2028 and U+0085, which JSON holds raw inside a
    # string, and at \x0b, \x0c, \x1c-\x1e, splitting one URL line into two targets. Only
    # spaces and tabs are trimmed: what else a line holds is refused by the target's own
    # checks, with the line's number.
    for number, raw in enumerate(_LINE_END.split(text), start=1):
        line = raw.strip(" \t")
        if not line or line.startswith("#"):
            continue
        if line.startswith("{"):
            try:
                value = STRICT_JSON.decode(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"not valid JSON: {exc.msg} (column {exc.colno})", line=number
                ) from None
            items.append(_Item(number, value, plain=False))
        elif line[0] in "\"'" or line[-1] in "\"'":
            raise InputError(
                f"{line[:80]} is quoted; write the URL bare, one per line, without quotes "
                '(or as a JSON object {"url": ...})',
                line=number,
            )
        elif any(ch.isspace() for ch in line):
            raise InputError(
                f"{line[:80]!r} is not a URL (it contains a space); write one URL per line, "
                "or one JSON object per line",
                line=number,
            )
        else:
            items.append(_Item(number, line, plain=True))
    return items


def _json_array(text: str) -> list[_Item]:
    """Decode a JSON array element by element, remembering the line each element starts on."""
    decoder = STRICT_JSON
    pos = _skip_space(text, 0) + 1  # past "["
    items: list[_Item] = []
    counted = [0, 1]  # an index, and the line it is on: lines are counted on from there

    def line_at(index: int) -> int:
        # Counted from the last element on, never from the start: a whole array is read
        # once, in linear time (counting from 0 for each element made 20 MB take 32 s).
        start, line = counted
        if index < start:
            return text.count("\n", 0, index) + 1  # an error's position, once
        counted[:] = [index, line + text.count("\n", start, index)]
        return counted[1]

    pos = _skip_space(text, pos)
    if pos < len(text) and text[pos] == "]":
        pos += 1
    else:
        while True:
            try:
                value, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON: {exc.msg}", line=exc.lineno) from None
            items.append(_Item(line_at(pos), value, plain=False))
            pos = _skip_space(text, end)
            if pos < len(text) and text[pos] == ",":
                pos = _skip_space(text, pos + 1)
                continue
            if pos < len(text) and text[pos] == "]":
                pos += 1
                break
            raise InputError("not valid JSON: expected ',' or ']'", line=line_at(pos))
    if _skip_space(text, pos) != len(text):
        raise InputError("not valid JSON: extra data after the array", line=line_at(pos))
    return items


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos
