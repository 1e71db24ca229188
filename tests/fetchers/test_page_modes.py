"""``mode: text``, ``markdown`` and ``main`` on realistic pages served by a local server
(tests/fetchers/data/pages: an article, a docs page, a product page, a broken page)."""

from __future__ import annotations

import pytest

from trio_batch import Options, Target
from trio_batch.fetchers import HttpFetcher, html_to_markdown, html_to_text

from ..support.local_server import LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

fetcher = HttpFetcher()


async def fetch_page(server: LocalServer, name: str, mode: str) -> str:
    result = await fetcher(Target(server.url(f"/pages/{name}.html"), Options(mode=mode)))
    return result.content


async def test_text_is_one_line_per_block_without_scripts_or_menus(server: LocalServer) -> None:
    text = await fetch_page(server, "article", "text")
    lines = text.splitlines()
    assert "Why the river town rebuilt its bridge in timber" in lines
    assert "What it cost" in lines
    # A paragraph wrapped over several source lines is one line.
    assert any(
        line.startswith("When the water went down") and line.endswith("cheaper.") for line in lines
    )
    assert "Option Cost (£m) Build time Design life" in lines  # a table row per line
    assert "- a visual inspection every six months;" in lines
    for hidden in ("dataLayer", "font-family", "NewsArticle", "Business"):  # script, style, nav
        assert hidden not in text


async def test_text_of_a_broken_page_reads_as_a_browser_shows_it(server: LocalServer) -> None:
    lines = (await fetch_page(server, "broken", "text")).splitlines()
    assert "Our first team beat Hill Street by 4½ to 3½ on Tuesday." in lines
    assert "- New boards <finally> arrived" in lines
    assert "14 Jan Riverside A Castle B" in lines
    assert "Last updated: 28/11/2026" in lines
    assert not any("written by script" in line for line in lines)
    assert any("© 2026" in line for line in lines)  # &copy without its semicolon


async def test_markdown_keeps_headings_lists_links_tables_and_code(server: LocalServer) -> None:
    article = await fetch_page(server, "article", "markdown")
    assert "# Why the river town rebuilt its bridge in timber\n" in article
    assert "\n## What it cost\n" in article
    assert "[annual budget](https://example.org/millbrook/budget.pdf)" in article
    assert "**glued laminated timber**" in article and "*70%*" in article
    assert "| Option | Cost (£m) | Build time | Design life |\n| --- | --- | --- | --- |" in article
    assert "| Glulam timber | 2.9 | 11 months | 80 years |" in article
    assert "1. the old piers" in article and "3. the deck" in article
    assert '> "A bridge you can repair' in article
    docs = await fetch_page(server, "docs", "markdown")
    assert "```\nfrom widgetlib import Client, RetryPolicy\n\nclient = Client(" in docs
    assert "[`RetryPolicy`](api.html#widgetlib.RetryPolicy)" in docs
    assert "toctree" not in docs and "Quick start" not in docs  # the side menu is a <nav>


def test_markdown_nests_lists_and_drops_empty_links() -> None:
    html = (
        "<ul><li>one<ul><li>one.a</li><li>one.b</li></ul></li><li>two</li></ul>"
        '<p><a href="/"><img src="logo.png"></a>Hello <a href="/x">there </a>you</p>'
        "<blockquote><p>quoted</p><p>twice</p></blockquote>"
    )
    assert html_to_markdown(html) == (
        "- one\n  - one.a\n  - one.b\n- two\n\nHello [there](/x) you\n\n> quoted\n>\n> twice"
    )
    assert html_to_text(html) == "- one\n- one.a\n- one.b\n- two\nHello there you\nquoted\ntwice"


@pytest.mark.parametrize(
    ("name", "kept", "dropped"),
    [
        (
            "article",
            ["# Why the river town", "| Glulam timber |", "a visual inspection every six months"],
            ["Most read", "Accept all", "Sign up", "Skip to content", "All rights reserved"],
        ),
        (
            "product",
            ["# Trailmaster 2 hiking boot", "Vibram Megagrip", "| Sole | Vibram Megagrip |"],
            ["Camping kit", "Company no.", "Free returns"],
        ),
        (
            "docs",
            ["Configuring retries", "`backoff * 2 ** (n - 1)`", "| `attempts` | 3 |"],
            ["Quick start", "View page source", "Built with Sphinx"],
        ),
    ],
)
async def test_main_keeps_the_content_and_drops_the_boilerplate(
    server: LocalServer, name: str, kept: list[str], dropped: list[str]
) -> None:
    main = await fetch_page(server, name, "main")
    for piece in kept:
        assert piece in main, piece
    for piece in dropped:
        assert piece not in main, piece


@pytest.mark.parametrize("mode", ["text", "markdown"])
async def test_html_nested_thousands_deep_converts(server: LocalServer, mode: str) -> None:
    # The walk is a loop, not recursion: no RecursionError at any depth.
    url = server.url("/generated?what=deep-html&n=3000")
    result = await fetcher(Target(url, Options(mode=mode)))
    assert result.content.replace("\n", "") == "x" * 3000
