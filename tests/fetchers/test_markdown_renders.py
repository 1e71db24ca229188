"""``mode: markdown`` read back by a CommonMark parser (markdown-it-py): the page as it reads,
with no markup shown as literal characters, no link lost and no word lost.

Each page in tests/fetchers/data/markdown is small and written for one construct seen on real
pages (icon fonts, teaser cards, FAQ lists, nested steps, ``<br>`` addresses, images, text that
looks like markup); tests/fetchers/data/pages holds whole realistic pages.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from selectolax.lexbor import LexborHTMLParser, LexborNode

from trio_batch.fetchers import html_to_markdown, html_to_text
from trio_batch.fetchers._markup import SKIPPED

DATA = Path(__file__).parent / "data"
CONSTRUCTS = DATA / "markdown"
PAGES = sorted([*CONSTRUCTS.glob("*.html"), *(DATA / "pages").glob("*.html")])

#: CommonMark with GFM tables, as strict about nesting as markdown-it's preset (20 levels).
commonmark = MarkdownIt("commonmark").enable("table")


def rendered(markdown: str) -> LexborNode:
    body = LexborHTMLParser(commonmark.render(markdown)).body
    assert body is not None
    return body


def first(node: LexborNode, selector: str) -> LexborNode:
    found = node.css_first(selector)
    assert found is not None, selector
    return found


def page(name: str) -> str:
    return (CONSTRUCTS / name).read_text(encoding="utf-8")


def links_in(html: str) -> set[str]:
    """The links of a page a reader can follow: with text, outside what the modes leave out."""
    found = set()
    body = LexborHTMLParser(html).body
    for a in body.css("a[href]") if body else []:
        href = (a.attributes.get("href") or "").strip()
        if not a.text().strip() or href.lower().startswith(("javascript:", "data:")):
            continue
        parent = a.parent
        while parent is not None and (parent.tag or "") not in SKIPPED | {"pre", "code"}:
            parent = parent.parent
        if parent is None:
            found.add(unquote(href))
    return found


def misreadings(html: str) -> list[str]:
    """What goes wrong when ``html``'s Markdown is rendered: markup shown as text (``*``,
    ``_``, a backtick, ``[`` or ``](`` more often than the page itself has them), a link lost,
    a word of the page lost."""
    markdown = html_to_markdown(html)
    shown = rendered(markdown)
    text, source = shown.text(separator=""), html_to_text(html)
    wrong = [
        f"{mark!r} shown {text.count(mark)} times, {source.count(mark)} in the page"
        for mark in ("*", "_", "`", "[", "](")
        if text.count(mark) > source.count(mark)
    ]
    hrefs = {unquote(a.attributes.get("href") or "") for a in shown.css("a")}
    wrong += [f"link to {href} lost" for href in sorted(links_in(html) - hrefs)]
    words = [w for line in source.splitlines() for w in line.removeprefix("- ").split()]
    lost = Counter(words) - Counter(text.split())  # text mode's "- " before an item is no word
    wrong += [f"word {word!r} lost" for word in sorted(lost)]
    return wrong


def test_every_fixture_page_renders_as_it_reads() -> None:
    found = {path.name: misreadings(path.read_text(encoding="utf-8")) for path in PAGES}
    assert {name: wrong for name, wrong in found.items() if wrong} == {}


def test_emphasis_around_nothing_or_at_a_space_is_left_out_or_tightened() -> None:
    html = page("icons.html")
    markdown = html_to_markdown(html)
    assert "journal *Nature Astronomy*, describe" in markdown
    assert "the **northern sky** twice" in markdown
    shown = rendered(markdown)
    assert [e.text() for e in shown.css("em")] == ["Nature Astronomy", "double", "pass"]
    assert [e.text() for e in shown.css("strong")] == ["By", "northern sky", "three countries"]
    assert "*" not in shown.text()
    assert misreadings(html) == []


def test_a_link_around_blocks_links_each_of_them() -> None:
    html = page("teasers.html")
    markdown = html_to_markdown(html)
    assert "[\n" not in markdown and "\n](" not in markdown
    shown = rendered(markdown)
    card = "https://news.example/ferry-timetable"
    assert first(shown, "h4 a").attributes["href"] == card
    assert [a.attributes["href"] for a in shown.css("a")].count(card) == 3
    teaser = first(shown, f"a[href='{card}'] img").attributes["alt"]
    assert teaser == "The morning ferry at the quay"
    assert misreadings(html) == []


def test_a_heading_inside_a_list_item_keeps_its_level_and_its_item() -> None:
    shown = rendered(html_to_markdown(page("list-headings.html")))
    assert [h.text() for h in shown.css("ul > li > h3")] == ["Who can join?", "What does it cost?"]
    assert [h.text() for h in shown.css("ol > li > h2, ol > li > h4")] == [
        "Fill in the form",
        "Show proof of address",
    ]
    assert [p.text() for p in shown.css("li > p")] == [
        "Anyone who lives, works or studies in the county.",
        "Nothing for adults; children's cards are free as well.",
        "Bring it to any branch.",
        "A recent bill or a tenancy letter.",
    ]


def test_blocks_inside_nested_items_stay_in_their_item() -> None:
    html = page("nested-blocks.html")
    shown = rendered(html_to_markdown(html))
    assert [p.text() for p in shown.css("ol > li > ul > li > p")][:2] == [
        "On Linux, unpack it:",
        "Check the checksum first.",
    ]
    quote = first(shown, "ol > li > ul > li > blockquote").text().strip()
    assert quote == "Never skip the checksum on a shared machine."
    code = shown.css("pre")
    assert [c.text() for c in code] == ["tar xf widget.tar.gz\ncd widget\n"]
    assert code[0].parent is not None and code[0].parent.tag == "li"
    assert len(shown.css("body > ol > li")) == 10  # the tenth's wider number keeps its list
    assert [p.text() for p in shown.css("ol > li > ul > li > p")][-2:] == [
        "The tenth step has its own notes.",
        "They are short.",
    ]
    assert first(shown, "blockquote > ul > li > blockquote").text().strip() == "Read it."
    assert misreadings(html) == []


def test_a_br_is_a_hard_break() -> None:
    shown = rendered(html_to_markdown(page("breaks.html")))
    lines = [p.html for p in shown.css("p, li")]
    assert lines[0] == "<p>Old Mill Museum<br>\n14 Water Lane<br>\nMillbrook MB1 2AA</p>"
    assert "Closed on Mondays<br>\nFree entry" in (lines[1] or "")
    assert lines[2] == "<li>Guided tours at 11:00<br>\nand again at 15:00</li>"


def test_images_keep_their_alt_text() -> None:
    html = page("images.html")
    markdown = html_to_markdown(html)
    shown = rendered(markdown)
    assert {i.attributes["alt"]: i.attributes["src"] for i in shown.css("img")} == {
        "A magnolia in full flower by the glasshouse": "https://img.example/magnolia.jpg",
        "star": "/icons/star.png",
        "Download the garden map": "/icons/map.png",
    }
    assert "and the tulip bed beside the pond" in shown.text()  # a data: image, its alt as text
    assert "base64" not in markdown
    assert first(shown, "a[href='https://garden.example/map.pdf'] img").attributes["alt"]


def test_text_that_looks_like_markup_reads_as_text() -> None:
    html = page("literal-text.html")
    shown = rendered(html_to_markdown(html))
    source = LexborHTMLParser(html)
    assert [n.text() for n in shown.css("h1, h2, p")] == [
        " ".join(n.text().split()) for n in source.css("h1, h2, p")
    ]
    assert [n.tag for n in shown.css("h1, h2, ol, ul")] == ["h1", "h2"]
    assert [a.attributes["href"] for a in shown.css("a")] == [
        "/guides/style%20guide%20%282nd%29.html"
    ]
    assert misreadings(html) == []


def test_an_ordered_list_keeps_its_start_number() -> None:
    shown = rendered(html_to_markdown('<ol start="7"><li>seventh</li><li>eighth</li></ol>'))
    assert first(shown, "ol").attributes.get("start") == "7"
    assert [li.text() for li in shown.css("ol > li")] == ["seventh", "eighth"]


#: Deep pages: (what repeats, what closes it, how many times). Thousands deep is far past
#: MAX_DEPTH and the recursion limit; deeper only costs time in the HTML parser, whose work
#: grows with the square of the depth (4 s at 20,000 deep).
DEEP = {
    "list": ("<ul><li>word", "</li></ul>", 5_000),
    "quote": ("<blockquote><p>word</p>", "</blockquote>", 5_000),
    "list of quotes": ("<ol><li><blockquote>word", "", 5_000),
}


@pytest.mark.parametrize("shape", DEEP)
def test_deep_nesting_gives_output_linear_in_the_input(shape: str) -> None:
    # Indents and ">" repeat on every line inside them: past a bound they are drawn at it.
    opening, closing, n = DEEP[shape]
    html = opening * n + closing * n
    markdown = html_to_markdown(html)
    assert markdown.count("word") == n
    assert len(markdown.encode()) < 2 * len(html)


@pytest.mark.parametrize("shape", DEEP)
def test_deep_nesting_renders_every_word_as_text(shape: str) -> None:
    # Within markdown-it's CommonMark nesting limit: no word in a code block, none lost.
    opening, closing, _ = DEEP[shape]
    html = opening * 60 + closing * 60
    shown = rendered(html_to_markdown(html))
    assert shown.text().split() == ["word"] * 60
    assert shown.css("pre, code") == []


WORDS = st.sampled_from(["a", "bc", "(x)", "y.", "-", "*", "_z_", "[1]", "`q`", "#", "1."])
INLINE = st.sampled_from(["b", "i", "em", "strong", "code", "a", "span"])


@st.composite
def inline_html(draw: st.DrawFn, depth: int = 3) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["word", "space", "element", "br"] if depth else ["word"]))
        if kind == "word":
            parts.append(draw(WORDS))
        elif kind == "space":
            parts.append(" ")
        elif kind == "br":
            parts.append(draw(st.sampled_from(["<br>", '<img src="/i.png" alt="i">', "<img>"])))
        else:
            tag = draw(INLINE)
            attrs = ' href="/p q"' if tag == "a" else ""
            parts.append(f"<{tag}{attrs}>{draw(inline_html(depth - 1))}</{tag}>")
    return "".join(parts)


@settings(max_examples=300, deadline=None)
@given(st.lists(inline_html(), min_size=1, max_size=3))
# Cases found before: code spans side by side, links in code, a break in code, an image in
# code, emphasis that CommonMark could read as closing an outer one.
@example(["<code>a<br>a</code>"])
@example(['<b><code><a href="/p q">a</a></code></b>'])
@example(['<a href="/p q"><code>a</code></a>'])
@example(["<b><b>a<code>a</code><code>a</code></b></b>"])
@example(["<b><i><code>a</code></i><i><code>a</code></i></b>"])
@example(["<b><b><i>a</i>(x)</b><i>(x)</i></b>"])
@example(['a<code><img src="/i.png" alt="i"></code>'])
def test_any_mix_of_inline_elements_renders_as_it_reads(paragraphs: list[str]) -> None:
    html = "".join(f"<p>{p}</p>" for p in paragraphs)
    assert misreadings(html) == []


@st.composite
def block_html(draw: st.DrawFn, depth: int = 4) -> str:
    kinds = ["p", "h3", "br-p", "list", "quote", "pre", "table", "div", "card"] if depth else ["p"]
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(kinds))
        words = draw(inline_html(1))
        if kind in ("p", "h3", "div"):
            parts.append(f"<{kind}>{words}</{kind}>")
        elif kind == "card":  # a link around blocks
            parts.append(f'<a href="/card"><img src="/c.png" alt="pic"><h4>{words}</h4></a>')
        elif kind == "br-p":
            parts.append(f"<p>{words}<br>{draw(WORDS)}</p>")
        elif kind == "pre":
            parts.append("<pre>x = 1\n\n  y</pre>")
        elif kind == "table":
            parts.append(f"<table><tr><th>{words}</th></tr><tr><td>a</td></tr></table>")
        elif kind == "quote":
            parts.append(f"<blockquote>{draw(block_html(depth - 1))}</blockquote>")
        else:
            tag = draw(st.sampled_from(["ul", "ol"]))
            items = draw(st.lists(block_html(depth - 1), min_size=1, max_size=3))
            parts.append(f"<{tag}>" + "".join(f"<li>{i}</li>" for i in items) + f"</{tag}>")
    return "".join(parts)


@settings(max_examples=200, deadline=None)
@given(block_html())
@example("<h3>#</h3>")  # a heading that is only a "#"
@example("<ul><li><ul><li><h3> </h3><p>a</p></li></ul></li></ul>")  # an item's empty heading
def test_any_nesting_of_blocks_renders_as_it_reads(html: str) -> None:
    assert misreadings(html) == []
    # No block indented into a code block: the only code is the page's own.
    shown = rendered(html_to_markdown(html))
    assert [c.text() for c in shown.css("pre")] == ["x = 1\n\n  y\n"] * html.count("<pre>")
