"""HTML to readable text or Markdown, on selectolax's Lexbor parser (a compiled HTML5 parser).

One walk of the parsed tree serves both: it cuts the page into blocks (paragraphs, headings,
list items, table rows, preformatted text) and renders them plainly (``mode: text``) or as
Markdown (``mode: markdown``: headings, lists, links, emphasis, code, tables, quotes). The
walk is a loop over an explicit stack, never recursion, so a page nested thousands deep costs
time (bounded by the worker's deadline), not a ``RecursionError``.

Lexbor parses as browsers do (the HTML5 algorithm), so broken markup (unclosed tags, stray
end tags, missing semicolons) reads as a browser would show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

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
_EMPHASIS = {"b": "**", "strong": "**", "i": "*", "em": "*"}


def html_to_text(html: str) -> str:
    """An HTML document as readable plain text: one line per block, no markup.

    Scripts, styles, the ``<head>``, form controls and ``<nav>`` menus are dropped; each block
    (paragraph, heading, list item, table row, ...) is one line, list items start with
    ``- ``, a table row's cells are separated by spaces, and whitespace is collapsed, so the
    result reads well and greps line by line.
    """
    return _render(html, "text")


def html_to_markdown(html: str) -> str:
    """An HTML document as Markdown: ``#`` headings, ``-``/``1.`` lists (nested by indent),
    ``[text](href)`` links, ``**bold**``, ``*italic*``, `` `code` ``, fenced ``pre`` blocks,
    ``>`` quotes and pipe tables. What :func:`html_to_text` drops is dropped here too."""
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
    kind: str  # "p", "li", "pre", "table"
    parts: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Table:
    rows: list[list[str]] = field(default_factory=list)
    cell: list[str] | None = None
    header_rows: int = 0


class _Walk:
    """The walk's state: blocks made so far, and where in lists, quotes and tables it is."""

    def __init__(self, style: Style) -> None:
        self.md = style == "markdown"
        self.blocks: list[_Block] = []
        self.lists: list[list[int]] = []  # per open list: [ordered (0/1), next number]
        self.quotes = 0
        self.pre = 0
        self.tables: list[_Table] = []
        self.links: list[tuple[str, _Block | None, int]] = []  # href, its block, where it starts
        self.block: _Block | None = None
        self.item_started = False  # the next block is a list item's first

    # -- blocks ------------------------------------------------------------------------------

    def _margin(self) -> str:
        return "> " * self.quotes if self.md else ""

    def start(self, kind: str, heading: int = 0) -> None:
        margin = self._margin()
        depth = len(self.lists)
        indent = margin + ("   " * max(0, depth) if self.md else "")
        prefix = indent
        if self.item_started and self.lists:
            ordered, number = self.lists[-1]
            bullet = f"{number}. " if ordered and self.md else "- "
            indent = margin + ("   " * depth if self.md else "")
            prefix = margin + ("   " * (depth - 1) if self.md else "") + bullet
            self.lists[-1][1] += 1
            self.item_started = False
            kind = "li"
        elif heading and self.md:
            prefix = margin + "#" * heading + " "
        self.block = _Block(prefix, indent, kind)
        self.blocks.append(self.block)

    def end(self) -> None:
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
            _leave(tag, node, walk)
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
        text = (" " if text[0].isspace() else "") + words + (" " if text[-1].isspace() else "")
    walk.write(text)


def _enter(tag: str, node: LexborNode, walk: _Walk) -> None:
    md = walk.md
    if tag in ("ul", "ol"):
        walk.lists.append([int(tag == "ol"), 1])
        walk.end()
    elif tag == "li":
        walk.item_started = True
        walk.end()
    elif tag == "blockquote":
        walk.quotes += 1
        walk.end()
    elif tag == "table":
        walk.end()
        walk.tables.append(_Table())
    elif walk.tables and tag == "tr":
        walk.tables[-1].rows.append([])
    elif walk.tables and tag in ("td", "th"):
        walk.tables[-1].cell = []
    elif tag == "pre":
        walk.pre += 1
        walk.start("pre")
    elif tag in _HEADINGS:
        walk.end()
        walk.start("h", _HEADINGS[tag])
    elif tag == "br":
        walk.write("\n")
    elif tag == "hr":
        walk.end()
    elif tag in BLOCKS:
        if walk.item_started or walk.block is None or walk.block.parts:
            walk.end()
    elif md and tag in _EMPHASIS and not walk.pre:
        walk.write(_EMPHASIS[tag])
    elif md and tag == "code" and not walk.pre:
        walk.write("`")
    elif md and tag == "a" and node.attributes.get("href"):
        walk.write("[")
        block = walk.block
        walk.links.append(
            (node.attributes.get("href") or "", block, len(block.parts) if block else 0)
        )


def _leave(tag: str, node: LexborNode, walk: _Walk) -> None:
    md = walk.md
    if tag in ("ul", "ol"):
        walk.lists.pop()
        walk.end()
    elif tag == "blockquote":
        walk.quotes -= 1
        walk.end()
    elif tag == "table":
        walk.end_table()
    elif walk.tables and tag in ("td", "th"):
        table = walk.tables[-1]
        if table.cell is not None:
            if not table.rows:
                table.rows.append([])
            table.rows[-1].append(" ".join("".join(table.cell).split()))
        table.cell = None
    elif tag == "pre":
        walk.pre -= 1
        walk.end()
    elif tag in BLOCKS or tag in _HEADINGS or tag == "li":
        walk.end()
    elif md and tag in _EMPHASIS and not walk.pre:
        walk.write(_EMPHASIS[tag])
    elif md and tag == "code" and not walk.pre:
        walk.write("`")
    elif md and tag == "a" and walk.links and node.attributes.get("href"):
        href, block, start = walk.links.pop()
        if block is walk.block and block is not None and not "".join(block.parts[start:]).strip():
            del block.parts[start - 1 :]  # a link with no text (an image's): nothing to show
        elif block is not None and block.parts and block.parts[-1].endswith(" "):
            block.parts[-1] = block.parts[-1].rstrip()  # "[Join ](x)" reads "[Join](x) "
            walk.write(f"]({href}) ")
        else:
            walk.write(f"]({href})")


def _assemble(walk: _Walk) -> str:
    """Join the blocks: one line each in text; in Markdown, blank lines between blocks except
    between the items of one list."""
    out: list[str] = []
    previous = ""
    for block in walk.blocks:
        raw = "".join(block.parts)
        if block.kind == "pre":
            body = raw.strip("\n")
            if not body.strip():
                continue
            lines = body.split("\n")
            if walk.md:
                lines = ["```", *lines, "```"]
            else:
                lines = [" ".join(line.split()) for line in lines]
                lines = [line for line in lines if line]
        elif block.kind == "table":
            lines = raw.split("\n")
        else:
            lines = [" ".join(line.split()) for line in raw.split("\n")]
            lines = [line for line in lines if line and line not in ("**", "*", "[]")]
            if not lines:
                continue
        text = "\n".join(
            (block.prefix if i == 0 else block.indent) + line for i, line in enumerate(lines)
        )
        if not walk.md:
            out.append(text)
        elif out:
            tight = block.kind == "li" and previous == "li"
            out.append(("\n" if tight else "\n\n") + text)
        else:
            out.append(text)
        previous = block.kind
    return ("\n" if not walk.md else "").join(out)
