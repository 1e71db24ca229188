"""``mode: markdown`` beside html-to-markdown, in one run: ``python -m benchmarks.markdown``.

On the fixture pages (tests/fetchers/data) and generated ones (a long article, a list nested
2,000 deep, an article inside a ``<form>``): milliseconds a page (best of the rounds) for
trio_batch and for html-to-markdown (configured to keep forms and leave out front matter), their
ratio, and for each how many pages read wrong once rendered by a CommonMark parser
(markdown-it-py): a stray ``*``, a lone ``[`` or ``](`` shown as text, or a word of the page
lost. html-to-markdown is in the ``bench`` group; without it only trio_batch's rows are shown.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from trio_batch.fetchers import html_to_markdown, html_to_text

DATA = Path(__file__).resolve().parents[1] / "tests" / "fetchers" / "data"

Convert = Callable[[str], str]


def pages() -> dict[str, list[str]]:
    """The page sets: the fixtures, and generated pages that stress size, depth and forms."""
    paths = sorted([*(DATA / "pages").glob("*.html"), *(DATA / "markdown").glob("*.html")])
    fixtures = [p.read_text(encoding="utf-8") for p in paths]
    article = (DATA / "pages" / "article.html").read_text(encoding="utf-8")
    body = article[article.index("<article>") : article.index("</article>") + 10]
    return {
        f"{len(fixtures)} fixture pages": fixtures,
        "generated": [
            article.replace("<article>", body * 20 + "<article>"),
            "<ul><li>word" * 2000 + "</li></ul>" * 2000,
            f"<form action='/comment'>{body}<input name=q></form>",
        ],
    }


def peer() -> Convert | None:
    """html-to-markdown as the issue's comparison configured it, or None if not installed."""
    try:
        import html_to_markdown as peer_module
    except ImportError:
        return None
    options = peer_module.ConversionOptions(
        extract_metadata=False,
        preprocessing=peer_module.PreprocessingOptions(remove_forms=False),
    )

    def convert(html: str) -> str:
        return str(peer_module.convert(html, options).content or "")

    return convert


def misread(html: str, markdown: str) -> set[str]:
    """What reads wrong in ``markdown`` rendered by markdown-it-py, against ``html``'s text."""
    from markdown_it import MarkdownIt
    from selectolax.lexbor import LexborHTMLParser

    node = LexborHTMLParser(MarkdownIt("commonmark").enable("table").render(markdown)).body
    text = node.text(separator="") if node is not None else ""
    source = html_to_text(html)
    wrong = set()
    if text.count("*") > source.count("*"):
        wrong.add("stray *")
    if text.count("](") > source.count("](") or any(line == "[" for line in text.splitlines()):
        wrong.add("lone [")
    words = Counter(w for line in source.splitlines() for w in line.removeprefix("- ").split())
    if words - Counter(text.split()):
        wrong.add("word lost")
    return wrong


def best_ms(convert: Convert, docs: list[str], rounds: int, n: int) -> float:
    """The best of ``rounds`` of ``n`` passes over ``docs``: milliseconds a page."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            for doc in docs:
                convert(doc)
        best = min(best, (time.perf_counter() - start) / (n * len(docs)))
    return best * 1000


def quality(convert: Convert, docs: list[str]) -> str:
    counts = Counter(kind for doc in docs for kind in misread(doc, convert(doc)))
    kinds = ("stray *", "lone [", "word lost")
    return ", ".join(f"{counts[k]} {k}" for k in kinds) + f" (of {len(docs)} pages)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-n", type=int, default=10, help="passes over the pages per round")
    parser.add_argument("--quick", action="store_true", help="one round of one pass")
    args = parser.parse_args()
    rounds, n = (1, 1) if args.quick else (args.rounds, args.n)
    other = peer()
    if other is None:
        print("html-to-markdown is not installed (pip install --group dev):")
        print("only trio_batch's rows are shown")
    for label, docs in pages().items():
        print(f"{label}: ms a page, best of {rounds} rounds of {n}")
        ours = best_ms(html_to_markdown, docs, rounds, n)
        print(
            f"  {'trio_batch mode markdown':<26} {ours:8.3f} ms   {quality(html_to_markdown, docs)}"
        )
        if other is not None:
            theirs = best_ms(other, docs, rounds, n)
            print(f"  {'html-to-markdown':<26} {theirs:8.3f} ms   {quality(other, docs)}")
            print(f"  {'ratio (theirs / ours)':<26} {theirs / ours:8.2f}x")


if __name__ == "__main__":
    main()
