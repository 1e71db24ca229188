"""Page processing, side by side in one run: ``python -m benchmarks.html_processing``.

On the fixture pages (tests/fetchers/data/pages) and on a long article made of the first one:
the old bs4 converter, ``mode: text``, ``markdown`` and ``main`` in-process, and ``mode: text``
through the fetcher's worker pool (what a target costs, the process hop included). Prints
milliseconds a page (best of the rounds) and each row's ratio to bs4. Needs the ``bench``
group for bs4.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import trio

from trio_batch import Options
from trio_batch.fetchers import html_to_markdown, html_to_text, main_content
from trio_batch.fetchers._body import Body
from trio_batch.fetchers._bounded import WorkerPool, process_bounded
from trio_batch.fetchers._options import plan_for

from .html_bs4 import html_to_text_bs4

PAGES = Path(__file__).resolve().parents[1] / "tests" / "fetchers" / "data" / "pages"


def _pages() -> dict[str, list[str]]:
    fixtures = [p.read_text(encoding="utf-8") for p in sorted(PAGES.glob("*.html"))]
    article = (PAGES / "article.html").read_text(encoding="utf-8")
    body = article[article.index("<article>") : article.index("</article>") + 10]
    long = article.replace('<main id="content">', '<main id="content">' + body * 20)
    return {
        f"{len(fixtures)} fixture pages": fixtures,
        f"article x20 ({len(long) // 1024} KiB)": [long],
    }


def _best_ms(convert: Callable[[str], object], docs: list[str], rounds: int, n: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            for doc in docs:
                convert(doc)
        best = min(best, (time.perf_counter() - start) / (n * len(docs)))
    return best * 1000


async def _worker_ms(docs: list[str], rounds: int, n: int) -> float:
    pool = WorkerPool()
    plan = plan_for(Options(mode="text"))
    bodies = [Body("http://bench/", 200, "text/html", "utf-8", d.encode(), 0) for d in docs]

    async def one(body: Body) -> None:
        await process_bounded(
            plan, body, 1, seconds=30, memory=2 << 30, max_output=64 << 20, pool=pool
        )

    await one(bodies[0])  # the worker's start is not a page's cost
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            for body in bodies:
                await one(body)
        best = min(best, (time.perf_counter() - start) / (n * len(bodies)))
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-n", type=int, default=10, help="passes over the pages per round")
    args = parser.parse_args()
    rows: list[tuple[str, Callable[[str], object]]] = [
        ("bs4 text (before)", html_to_text_bs4),
        ("mode text", html_to_text),
        ("mode markdown", html_to_markdown),
        ("mode main", main_content),
    ]
    for label, docs in _pages().items():
        print(f"{label}: ms a page, best of {args.rounds} rounds")
        base = _best_ms(html_to_text_bs4, docs, args.rounds, args.n)
        for name, convert in rows:
            ms = (
                base
                if convert is html_to_text_bs4
                else _best_ms(convert, docs, args.rounds, args.n)
            )
            print(f"  {name:<28} {ms:8.3f} ms   {base / ms:6.2f}x bs4")
        ms = trio.run(_worker_ms, docs, args.rounds, args.n)
        print(f"  {'mode text, via the worker':<28} {ms:8.3f} ms   {base / ms:6.2f}x bs4")


if __name__ == "__main__":
    main()
