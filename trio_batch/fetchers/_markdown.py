"""The inline half of ``mode: markdown``: escaping text, and turning a block's text and
emphasis, code and link marks into Markdown that a CommonMark parser reads back as written.

The walk (``_markup``) records where an inline element opens and closes as :class:`Mark`
tokens among a block's text; :func:`render_inline` decides at the end, with the whole block in
hand, which marks can be written: an element around nothing (an icon font's ``<i></i>``) is
dropped, the spaces at its edges move outside it, and emphasis that CommonMark would not read
as emphasis (``x**(y)**z``) is left out, its text kept.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Mark", "escape_line_start", "escape_text", "render_inline", "safe_url"]

#: ASCII punctuation CommonMark reads as markup anywhere in a line; a backslash makes it text.
_ALWAYS = re.compile(r"[\\*`\[\]]|(?<![^\W_])_|_(?![^\W_])|<(?=[A-Za-z/!?])|&(?=#|\w+;)")
_SPECIAL = re.compile(r"[\\*`\[\]_<&]")
#: What starts a block when it opens a line: headings, quotes, lists, breaks, setext lines.
_LINE_START = re.compile(r"[#>+\-=~]|\d{1,9}(?=[.)])")
_BAD_SCHEMES = ("javascript:", "vbscript:", "data:", "file:")
_URL_UNSAFE = re.compile(r"[\s()<>\\]")


@dataclass(slots=True, eq=False)
class Mark:
    """Where an inline element opens or closes: ``kind`` is ``"**"``, ``"*"``, ``"`"`` or
    ``"a"`` (a link to ``url``); the open and close marks of one element share ``key``."""

    kind: str
    key: int
    opening: bool
    url: str = ""


@dataclass(slots=True, eq=False)
class _Delim:
    text: str
    opening: bool
    pair: int
    kept: bool = True


@dataclass(slots=True, eq=False)
class _Code:
    code: str
    url: str | None  # the link around it


Piece = str | _Delim | _Code


def escape_text(text: str) -> str:
    """``text`` with the characters CommonMark would read as inline markup escaped."""
    if _SPECIAL.search(text) is None:  # most text: one quick scan
        return text
    return _ALWAYS.sub(lambda m: "\\" + m.group(), text)


def escape_line_start(line: str) -> str:
    """``line`` with a backslash before what would start a block (``# ``, ``- ``, ``1.``)."""
    found = _LINE_START.match(line)
    if found is None:
        return line
    end = found.end()
    return line[:end] + "\\" + line[end:] if line[:1].isdigit() else "\\" + line


def safe_url(href: str) -> str | None:
    """``href`` as a link destination (spaces, parentheses and angle brackets percent-encoded),
    or None for a scheme that renderers refuse to link (``javascript:``, ``data:``)."""
    href = href.strip()
    if not href or href.lower().startswith(_BAD_SCHEMES):
        return None
    return _URL_UNSAFE.sub(lambda m: "%" + "".join(f"{b:02X}" for b in m.group().encode()), href)


def render_inline(parts: list[str | Mark]) -> str:
    """A block's text and marks as Markdown. Marks without their other half are dropped."""
    if Mark not in map(type, parts):
        return "".join(parts)  # type: ignore[arg-type]  # all str: no mark among them
    pieces = _flatten(_tree(parts))
    kinds = set(map(type, pieces))
    if _Delim in kinds:
        _merge_touching(pieces)
        _drop_unflanked(pieces)
        pieces = [p.text if isinstance(p, _Delim) else p for p in pieces if _kept(p)]
    if _Code in kinds:
        return "".join(_join_code(pieces))
    return "".join(pieces)  # type: ignore[arg-type]  # text only: links are text by now


def _kept(piece: Piece) -> bool:
    return not isinstance(piece, _Delim) or piece.kept


def _join_code(pieces: list[Piece]) -> Iterator[str]:
    """The pieces as text. Code spans side by side are written as one: apart, their backticks
    would run together into one longer fence."""
    span: _Code | None = None
    for piece in pieces:
        if isinstance(piece, _Code) and span is not None and piece.url == span.url:
            span.code += piece.code
            continue
        if span is not None and piece != "":
            yield _code_span(span.code, span.url)
            span = None
        if isinstance(piece, _Code):
            span = piece
        else:
            yield piece if isinstance(piece, str) else piece.text
    if span is not None:
        yield _code_span(span.code, span.url)


@dataclass(slots=True, eq=False)
class _Node:
    mark: Mark | None
    children: list[str | _Node]


def _tree(parts: list[str | Mark]) -> _Node:
    root = _Node(None, [])
    stack = [root]
    for part in parts:
        if isinstance(part, str):
            stack[-1].children.append(part)
        elif part.opening:
            node = _Node(part, [])
            stack[-1].children.append(node)
            stack.append(node)
        elif len(stack) > 1 and stack[-1].mark is not None and stack[-1].mark.key == part.key:
            stack.pop()
    return root  # an element never closed here is rendered as if it were


def _flatten(node: _Node) -> list[Piece]:
    inner: list[Piece] = []
    for child in node.children:
        inner.extend([child] if isinstance(child, str) else _flatten(child))
    mark = node.mark
    if mark is None:
        return inner
    if mark.kind != "`" and str in map(type, inner) and len(set(map(type, inner))) == 1:
        return _around_text(mark, "".join(inner))  # type: ignore[arg-type]  # the usual case
    if not any(isinstance(p, _Code) or (isinstance(p, str) and p.strip()) for p in inner):
        return inner  # around nothing but spaces: nothing to mark
    lead, inner, trail = _trim(inner)
    if mark.kind == "`":  # a code span holds no markup, no line break; a link goes around it
        code = "".join(_texts(node)).strip().replace("\n", " ")
        return [lead, _Code(code, next(_urls(node), None)), trail]
    if mark.kind == "a":
        return [lead, "[", *inner, f"]({mark.url})", trail]
    opening, closing = _Delim(mark.kind, True, mark.key), _Delim(mark.kind, False, mark.key)
    return [lead, opening, *inner, closing, trail]


def _around_text(mark: Mark, text: str) -> list[Piece]:
    """:func:`_flatten` for an element around text only: the same, with string operations."""
    core = text.strip()
    if not core:
        return [text]
    lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
    if mark.kind == "a":
        return [f"{lead}[{core}]({mark.url}){trail}"]
    return [
        lead,
        _Delim(mark.kind, True, mark.key),
        core,
        _Delim(mark.kind, False, mark.key),
        trail,
    ]


def _texts(node: _Node) -> Iterator[str]:
    for child in node.children:
        yield from [child] if isinstance(child, str) else _texts(child)


def _urls(node: _Node) -> Iterator[str]:
    for child in node.children:
        if isinstance(child, _Node):
            if child.mark is not None and child.mark.kind == "a":
                yield child.mark.url
            yield from _urls(child)


def _trim(inner: list[Piece]) -> tuple[str, list[Piece], str]:
    """Move the spaces at the edges of ``inner`` out of it (``* Nature*`` reads as text)."""
    first, last = 0, len(inner)
    while first < last and _blank(inner[first]):
        first += 1
    while last > first and _blank(inner[last - 1]):
        last -= 1
    lead = "".join(p for p in inner[:first] if isinstance(p, str))
    trail = "".join(p for p in inner[last:] if isinstance(p, str))
    middle = inner[first:last]
    head = middle[0] if middle else None
    if isinstance(head, str):
        kept = head.lstrip()
        lead, middle[0] = lead + head[: len(head) - len(kept)], kept
    tail = middle[-1] if middle else None
    if isinstance(tail, str):
        kept = tail.rstrip()
        trail, middle[-1] = tail[len(kept) :] + trail, kept
    return lead, middle, trail


def _blank(piece: Piece) -> bool:
    return isinstance(piece, str) and not piece.strip()


def _code_span(code: str, url: str | None) -> str:
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if code.startswith("`") or code.endswith("`") else ""
    span = f"{fence}{pad}{code}{pad}{fence}"
    return f"[{span}]({url})" if url else span


def _merge_touching(pieces: list[Piece]) -> None:
    """``**a****b**`` does not read as two bold words: a close touching an open of the same
    kind is dropped with it, so the two become one (``**ab**``)."""
    previous: _Delim | None = None
    renamed: dict[int, int] = {}  # the second element's close now closes the first
    for piece in pieces:
        if isinstance(piece, _Delim):
            if previous and not previous.opening and piece.opening and previous.text == piece.text:
                previous.kept = piece.kept = False
                renamed[piece.pair] = renamed.get(previous.pair, previous.pair)
                previous = None
            else:
                previous = piece
        elif piece:
            previous = None
    for piece in pieces:
        if isinstance(piece, _Delim) and piece.kept and piece.pair in renamed:
            piece.pair = renamed[piece.pair]


def _drop_unflanked(pieces: list[Piece]) -> None:
    """Leave out emphasis that CommonMark would show as asterisks or pair otherwise: an open
    must be left-flanking only and a close right-flanking only, with the characters around
    them as written (so ``x**(y)**z`` and ``a**b**c`` are written without the asterisks)."""
    for _ in range(8):  # a drop changes only its neighbours' context: a few passes settle it
        found: dict[tuple[int, bool], int] = {}
        for i, piece in enumerate(pieces):
            if isinstance(piece, _Delim) and piece.kept:
                found[(piece.pair, piece.opening)] = i
        dropped = []
        for (pair, opening), i in found.items():
            j = found.get((pair, not opening))
            if j is None:
                dropped.append(i)
            elif opening and not (_opens(pieces, i) and _closes(pieces, j)):
                dropped += [i, j]
        for i in dropped:
            piece = pieces[i]
            if isinstance(piece, _Delim):
                piece.kept = False
        if not dropped:
            return


def _opens(pieces: list[Piece], i: int) -> bool:
    # Only left-flanking: a run that could also close (a*b) may close an outer element.
    before, after = _before(pieces, i), _after(pieces, i)
    return _left_flanking(before, after) and not _right_flanking(before, after)


def _closes(pieces: list[Piece], i: int) -> bool:
    before, after = _before(pieces, i), _after(pieces, i)
    return _right_flanking(before, after) and not _left_flanking(before, after)


def _before(pieces: list[Piece], i: int) -> str:
    """The character before a delimiter run, as a parser sees it (a line start is a space)."""
    for k in range(i - 1, -1, -1):
        piece = pieces[k]
        if isinstance(piece, str) and piece:
            return piece[-1]
        if isinstance(piece, _Code):
            return "`"
    return " "


def _after(pieces: list[Piece], i: int) -> str:
    for k in range(i + 1, len(pieces)):
        piece = pieces[k]
        if isinstance(piece, str) and piece:
            return piece[0]
        if isinstance(piece, _Code):
            return "`"
    return " "


def _punct(char: str) -> bool:
    return unicodedata.category(char)[0] in "PS"


def _left_flanking(before: str, after: str) -> bool:
    return not after.isspace() and (not _punct(after) or before.isspace() or _punct(before))


def _right_flanking(before: str, after: str) -> bool:
    return not before.isspace() and (not _punct(before) or after.isspace() or _punct(after))
