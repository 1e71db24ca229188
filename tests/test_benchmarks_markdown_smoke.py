"""Keep benchmarks/markdown.py from rotting: its rows at one pass, and its checks of what a
rendered page shows. No timing is asserted."""

from __future__ import annotations

from benchmarks import markdown


def test_the_misreadings_it_counts_are_the_ones_a_reader_sees() -> None:
    html = "<p>the journal<em> Nature</em></p><a href='/x'><h4>Teaser</h4></a>"
    shown_raw = "the journal* Nature*\n\n[\n\n#### Teaser\n\n](/x)"
    assert markdown.misread(html, shown_raw) == {"stray *", "lone [", "word lost"}
    assert markdown.misread(html, "the journal") == {"word lost"}
    assert markdown.misread(html, "the journal *Nature*\n\n#### [Teaser](/x)") == set()


def test_each_row_runs_on_every_page_set() -> None:
    for docs in markdown.pages().values():
        assert markdown.best_ms(markdown.html_to_markdown, docs, rounds=1, n=1) > 0
        found = markdown.quality(markdown.html_to_markdown, docs)
        assert found == f"0 stray *, 0 lone [, 0 word lost (of {len(docs)} pages)"


def test_the_peer_row_runs() -> None:
    convert = markdown.peer()
    assert convert is not None, "html-to-markdown is not installed: pip install --group dev"
    assert "**bold**" in convert("<form><p><b>bold</b></p></form>")
