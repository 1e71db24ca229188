"""The HTML-to-text converter trio_batch used before selectolax (beautifulsoup4 with Python's
``html.parser``), kept for the benchmarks' comparison row only. Needs the ``bench`` extra."""

from __future__ import annotations

from trio_batch.fetchers._markup import BLOCKS as _BLOCKS
from trio_batch.fetchers._markup import SKIPPED

__all__ = ["html_to_text_bs4"]


def html_to_text_bs4(html: str) -> str:
    """An HTML document as readable plain text, as trio_batch's ``mode: text`` made it before
    (the same elements skipped and the same blocks as the new one, for a fair comparison).

    Scripts, styles, the ``<head>``, other invisible elements and ``<nav>`` menus are dropped;
    each block element (paragraph, heading, list item, table row, ...) starts a new line, list
    items get a ``- `` prefix, whitespace within a line is collapsed and blank lines are
    removed, so the result reads well and greps line by line.
    """
    from bs4 import BeautifulSoup, Tag

    soup = BeautifulSoup(html, "html.parser")
    for tag in soup(list(SKIPPED)):
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
