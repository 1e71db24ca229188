"""HTML to readable text or Markdown, on selectolax's Lexbor parser (a compiled HTML5 parser).

One walk of the parsed tree serves both: it cuts the page into blocks (paragraphs, headings,
list items, table rows, preformatted text) and renders them plainly (``mode: text``) or as
Markdown (``mode: markdown``: headings, lists, links, images, emphasis, code, tables, quotes;
``_markdown`` writes the inline part). The walk is a loop over an explicit stack, never
recursion, so a page nested thousands deep costs time (bounded by the worker's deadline), not a
``RecursionError``; in Markdown, containers past ``MAX_DEPTH`` share its indent, so the
output stays linear in the input.

Lexbor parses as browsers do (the HTML5 algorithm), so broken markup (unclosed tags, stray
end tags, missing semicolons) reads as a browser would show it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ._markdown import Mark, escape_line_start, escape_text, render_inline, safe_url

if TYPE_CHECKING:
    from selectolax.lexbor import LexborNode

__all__ = ["convert_html", "html_to_markdown", "html_to_text", "main_content"]

Style = Literal["text", "markdown"]

#: Elements whose content is never shown, or is navigation rather than content.
SKIPPED = frozenset(
    [
        "script",
        "style",
        "noscript",
        "template",
        "head",
        "svg",
        "iframe",
        "object",
        "nav",
        "button",
        "select",
        "input",
        "textarea",
    ]
)
#: Elements that start a block of their own.
BLOCKS = frozenset(
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
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tr",
        "ul",
        "caption",
        "legend",
        "label",
    ]
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
#: Markdown's inline elements: what each marks its text with (links and images are their own).
_INLINE = {
    "b": "**",
    "strong": "**",
    "i": "*",
    "em": "*",
    "code": "`",
    "kbd": "`",
    "samp": "`",
    "tt": "`",
    "a": "a",
    "img": "img",
}
#: List items and quotes past this depth are drawn at it: their indent or ``>`` repeats on each
#: line inside them, so drawing every level would make output grow as depth times size. Eight
#: stays within the nesting markdown-it's CommonMark preset parses (20 block levels).
MAX_DEPTH = 8


def html_to_text(html: str) -> str:
    """An HTML document as readable plain text: one line per block, no markup.

    Scripts, styles, the ``<head>``, form controls and ``<nav>`` menus are dropped; each block
    (paragraph, heading, list item, table row, ...) is one line, list items start with
    ``- ``, a table row's cells are separated by spaces, and whitespace is collapsed, so the
    result reads well and greps line by line.
    """
    return _render(html, "text")


def html_to_markdown(html: str) -> str:
    """An HTML document as CommonMark (with pipe tables): ``#`` headings, ``-``/``1.`` lists
    (nested by indent), ``[text](href)`` links, ``![alt](src)`` images, ``**bold**``,
    ``*italic*``, `` `code` ``, fenced ``pre`` blocks, ``>`` quotes, a backslash hard break
    for ``<br>``. Text that would read as markup is escaped. Lists and quotes nested more than
    eight deep are drawn at the eighth level, so the output grows linearly with the input.
    What :func:`html_to_text` drops is dropped here too."""
    return _render(html, "markdown")


def main_content(html: str, url: str | None = None) -> str:
    """The main content of a page as Markdown, without navigation, ads, comments, related
    links and other boilerplate; the whole page (:func:`html_to_markdown`) if none is found.

    Uses trafilatura, which scores the page's blocks by their text and link density and its
    known patterns of boilerplate (the best of the open-source extractors on published
    comparisons, Apache-licensed, maintained), keeping headings, lists, tables and links.
    """
    import trafilatura

    found = trafilatura.extract(
        html,
        url=url,
        output_format="markdown",
        include_tables=True,
        include_links=True,
        include_comments=False,
        favor_recall=True,
        deduplicate=False,
    )
    return found if found else html_to_markdown(html)


def convert_html(mode: str, html: str, url: str | None = None) -> str:
    """``html`` as ``mode`` says: ``"text"``, ``"markdown"`` or ``"main"``."""
    if mode == "text":
        return html_to_text(html)
    if mode == "markdown":
        return html_to_markdown(html)
    if mode == "main":
        return main_content(html, url)
    raise ValueError(f"no HTML mode {mode!r}")


@dataclass(slots=True)
class _Block:
    prefix: str  # the first line's prefix ("## ", "  - ", "> ")
    indent: str  # the prefix of its other lines
    kind: str  # "p", "h", "pre", "table"
    item: bool = False  # a list item's first block
    heading: int = 0  # Markdown: the heading's level
    parts: list[str | Mark] = field(default_factory=list)


@dataclass(slots=True)
class _Frame:
    indent: str  # what a list item or quote puts before its lines: spaces, or "> "
    bullet: str = ""  # an item's marker, until its first block takes it


@dataclass(slots=True)
class _Table:
    rows: list[list[str]] = field(default_factory=list)
    cell: list[str | Mark] | None = None


class _Walk:
    """The walk's state: blocks made so far, and where in lists, quotes and tables it is."""

    def __init__(self, style: Style) -> None:
        self.md = style == "markdown"
        self.blocks: list[_Block] = []
        self.lists: list[list[int]] = []  # per open list: [ordered (0/1), next number]
        self.frames: list[_Frame] = []  # Markdown: the open list items and quotes
        self.pre = 0
        self.tables: list[_Table] = []
        self.inline: list[Mark | None] = []  # per open inline element: its mark, if it has one
        self.active: list[Mark] = []  # the marks open now, at most one of each kind
        self.keys = 0
        self.block: _Block | None = None
        self.item_started = False  # text: the next block is a list item's first

    # -- blocks ------------------------------------------------------------------------------

    def start(self, kind: str, heading: int = 0) -> None:
        block = self._markdown_block(kind, heading) if self.md else _Block("", "", kind)
        if not self.md and self.item_started and self.lists:
            block.prefix, block.item, self.item_started = "- ", True, False
        self.block = block
        self.blocks.append(block)
        if self.active and kind not in ("pre", "table"):
            block.parts.extend(self.active)  # the inline elements open across blocks

    def _markdown_block(self, kind: str, heading: int) -> _Block:
        frames = self.frames
        if len(frames) > MAX_DEPTH:  # deeper containers are drawn at the bound
            frames = [*frames[: MAX_DEPTH - 1], frames[-1]]
        prefix = indent = ""
        item = False
        for frame in frames:
            indent += frame.indent
            prefix += frame.bullet or frame.indent
            item = item or bool(frame.bullet)
            frame.bullet = ""
        return _Block(prefix, indent, kind, item, heading)

    def end(self) -> None:
        block = self.block
        if block is not None and self.active and block.kind not in ("pre", "table"):
            block.parts.extend(Mark(m.kind, m.key, False) for m in reversed(self.active))
        self.block = None

    def write(self, text: str) -> None:
        table = self.tables[-1] if self.tables else None
        if table is not None and table.cell is not None:
            table.cell.append(text)
            return
        if self.block is None:
            if not text.strip():
                return
            self.start("p")
        assert self.block is not None
        self.block.parts.append(text)

    def has_text(self) -> bool:
        """Whether the current block holds text (not only the marks it opened with)."""
        return self.block is not None and any(isinstance(p, str) for p in self.block.parts)

    # -- lists and quotes ----------------------------------------------------------------------

    def open_item(self) -> None:
        self.end()
        if not self.md:
            self.item_started = True
            return
        bullet = "- "
        if self.lists:
            ordered, number = self.lists[-1]
            bullet = f"{number}. " if ordered else "- "
            self.lists[-1][1] += 1
        self.frames.append(_Frame(" " * len(bullet), bullet))

    # -- inline elements (Markdown) ----------------------------------------------------------

    def open_inline(self, kind: str, url: str = "") -> None:
        if self.pre or any(m.kind == kind for m in self.active):
            self.inline.append(None)  # inside one of its kind, it adds nothing
            return
        self.keys += 1
        mark = Mark(kind, self.keys, True, url)
        self.inline.append(mark)
        self.active.append(mark)
        self._mark(mark)

    def close_inline(self) -> None:
        mark = self.inline.pop() if self.inline else None
        if mark is not None:
            self.active.remove(mark)
            self._mark(Mark(mark.kind, mark.key, False))

    def in_code(self) -> bool:
        return any(m.kind == "`" for m in self.active)

    def _mark(self, mark: Mark) -> None:
        table = self.tables[-1] if self.tables else None
        if table is not None and table.cell is not None:
            table.cell.append(mark)
        elif self.block is not None and self.block.kind not in ("pre", "table"):
            self.block.parts.append(mark)

    # -- tables ------------------------------------------------------------------------------

    def end_table(self) -> None:
        table = self.tables.pop()
        rows = [r for r in table.rows if any(c for c in r)]
        if not rows:
            return
        self.start("table")
        assert self.block is not None
        if self.md:
            width = max(len(r) for r in rows)
            padded = [r + [""] * (width - len(r)) for r in rows]
            lines = ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in padded]
            lines.insert(1, "|" + " --- |" * width)
        else:
            lines = [" ".join(c for c in r if c) for r in rows]
        self.block.parts.append("\n".join(lines))
        self.end()


def _render(html: str, style: Style) -> str:
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    walk = _Walk(style)
    root = tree.body
    if root is not None:
        _walk(root, walk)
    return _assemble(walk)


def _walk(root: LexborNode, walk: _Walk) -> None:
    """Visit ``root``'s descendants in document order, entering and leaving each element."""
    stack: list[tuple[LexborNode, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        tag = node.tag or ""
        if leaving:
            _leave(tag, walk)
            continue
        if tag == "-text":
            _text(node.text_content or "", walk)
            continue
        if tag.startswith("-") or tag in SKIPPED or _hidden(node):
            continue
        _enter(tag, node, walk)
        stack.append((node, True))
        children = []
        child = node.child
        while child is not None:
            children.append(child)
            child = child.next
        stack.extend((c, False) for c in reversed(children))


def _hidden(node: LexborNode) -> bool:
    attrs = node.attributes
    return "hidden" in attrs or attrs.get("aria-hidden") == "true"


def _text(text: str, walk: _Walk) -> None:
    if not walk.pre:
        words = " ".join(text.split())
        if not words:
            walk.write(" ")  # the space between two inline elements
            return
        if walk.md and not (walk.active and walk.in_code()):
            words = escape_text(words)
        text = (" " if text[0].isspace() else "") + words + (" " if text[-1].isspace() else "")
    walk.write(text)


def _enter(tag: str, node: LexborNode, walk: _Walk) -> None:
    if tag in ("ul", "ol"):
        start = node.attributes.get("start") or ""
        first = int(start) if tag == "ol" and start.isdigit() and len(start) < 10 else 1
        walk.lists.append([int(tag == "ol"), first])
        walk.end()
    elif tag == "li":
        walk.open_item()
    elif tag == "blockquote":
        walk.end()
        if walk.md:
            walk.frames.append(_Frame("> "))
    elif tag == "table":
        walk.end()
        walk.tables.append(_Table())
    elif walk.tables and tag == "tr":
        walk.tables[-1].rows.append([])
    elif walk.tables and tag in ("td", "th"):
        walk.tables[-1].cell = []
    elif tag == "pre":
        walk.pre += 1
        walk.end()
        walk.start("pre")
    elif tag in _HEADINGS:
        walk.end()
        walk.start("h", _HEADINGS[tag] if walk.md else 0)
    elif tag == "br":
        walk.write("\n")
    elif tag == "hr":
        walk.end()
    elif tag in BLOCKS:
        if walk.has_text():
            walk.end()
    elif walk.md and tag in _INLINE:
        _enter_inline(tag, node, walk)


def _enter_inline(tag: str, node: LexborNode, walk: _Walk) -> None:
    if tag == "img":
        alt = " ".join((node.attributes.get("alt") or "").split())
        if alt and not walk.pre and not walk.in_code():  # code holds text only
            url = safe_url(node.attributes.get("src") or "")
            walk.write(f"![{escape_text(alt)}]({url})" if url else escape_text(alt))
    elif tag == "a":
        url = safe_url(node.attributes.get("href") or "")
        if url is None:
            walk.inline.append(None)  # no link to show: its text is kept
        else:
            walk.open_inline("a", url)
    else:
        walk.open_inline(_INLINE[tag])


def _leave(tag: str, walk: _Walk) -> None:
    if tag in ("ul", "ol"):
        walk.lists.pop()
        walk.end()
    elif tag in ("li", "blockquote"):
        walk.end()
        if walk.md and walk.frames:
            walk.frames.pop()
    elif tag == "table":
        walk.end_table()
    elif walk.tables and tag in ("td", "th"):
        table = walk.tables[-1]
        if table.cell is not None:
            if not table.rows:
                table.rows.append([])
            table.rows[-1].append(" ".join(render_inline(table.cell).split()))
        table.cell = None
    elif tag == "pre":
        walk.pre -= 1
        walk.end()
    elif tag in BLOCKS or tag in _HEADINGS:
        walk.end()
    elif walk.md and tag in _INLINE and tag != "img":
        walk.close_inline()


def _assemble(walk: _Walk) -> str:
    """Join the blocks: one line each in text; in Markdown, blank lines between blocks except
    between the items of one list."""
    out: list[str] = []
    previous: _Block | None = None
    bullet: _Block | None = None  # an empty block that took its item's marker
    for block in walk.blocks:
        lines = _lines(block, walk.md)
        if not lines:
            bullet = block if block.item and walk.md else bullet
            continue
        if bullet is not None and block.prefix.startswith(bullet.indent):
            # The item's first block with text, inside it, takes the marker on.
            block.prefix = bullet.prefix + block.prefix[len(bullet.indent) :]
            block.item = True
        bullet = None
        text = block.prefix + lines[0]
        if len(lines) > 1:
            bare = block.indent.rstrip()  # an empty line of a code block inside a quote
            text += "".join("\n" + (block.indent + line if line else bare) for line in lines[1:])
        if not walk.md or previous is None:
            out.append(text)
        elif block.item and previous.item and block.kind == previous.kind == "p":
            out.append("\n" + text)  # the items of a tight list
        else:
            out.append("\n" + _shared(previous.indent, block.indent) + "\n" + text)
        previous = block
    return ("\n" if not walk.md else "").join(out)


def _shared(one: str, other: str) -> str:
    """The blank line between two blocks: the quotes they share stay open across it."""
    if not one or not other:
        return ""
    n = 0
    while n < min(len(one), len(other)) and one[n] == other[n]:
        n += 1
    return one[:n].rstrip()


def _lines(block: _Block, md: bool) -> list[str]:
    """A block's lines, without its prefixes: escaped where a line start reads as markup, and
    in Markdown ending in a backslash where a ``<br>`` breaks them."""
    raw = render_inline(block.parts)
    if block.kind == "table":
        return raw.split("\n")
    if block.kind == "pre":
        body = raw.strip("\n")
        if not body.strip():
            return []
        if not md:
            return [line for line in (" ".join(line.split()) for line in body.split("\n")) if line]
        fence = "`" * max(3, 1 + max(len(run) for run in ("", *re.findall("`+", body))))
        return [fence, *body.split("\n"), fence]
    if "\n" not in raw:  # most blocks: one line
        line = " ".join(raw.split())
        lines = [escape_line_start(line) if md else line] if line else []
        if block.kind != "h" or not lines:
            return lines
    lines = [line for line in (" ".join(line.split()) for line in raw.split("\n")) if line]
    if not md or not lines:
        return lines
    lines = [escape_line_start(line) for line in lines]
    if block.kind == "h":  # a heading is one line; a "#" at its end would be read as markup
        heading = " ".join(lines)
        closing = heading.endswith("#") and not heading.endswith("\\#")
        return ["#" * block.heading + " " + (heading[:-1] + "\\#" if closing else heading)]
    return [line + "\\" for line in lines[:-1]] + lines[-1:]
