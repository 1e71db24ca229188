"""End-to-end fetch rows of ``make bench``: ``python -m benchmarks.fetch [--quick] [--rounds N]``.

A local HTTPS server with keep-alive runs in a process of its own (tests/support/tls_server.py,
a trustme certificate, pages of about 4 KiB). Per round, in the same run, each side fetches
8 jobs of 32 distinct pages:

- **plain httpx**: one shared ``httpx.AsyncClient``, 8 trio tasks fetching their 32 pages one
  after another (the least code a trio user would write);
- **trio_batch**: ``open_runner`` on a SQLite file + ``HttpFetcher``, 8 jobs of 32 targets,
  with ``per_host_concurrency=8`` (as many in flight as the plain loop) and with the default 4;
- **text**: the same two with HTML turned into text: the plain loop calls the fetcher's own
  converter (``trio_batch.fetchers.html_to_text``) in-process, trio_batch uses ``mode: text``;
- **a 20 ms server**: plain and raw again, with the server taking 20 ms over each page, as a
  fast real site does. The local server otherwise answers at once, so the rows above measure
  the client's CPU per page, not a fetch's wait.

Figures are pages/s, medians over interleaved rounds; ratios are taken within a round. Read
the ratios, not the absolute figures: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import trio

from trio_batch import Config, JobState, Options, Store, Target, open_runner
from trio_batch.fetchers import HttpFetcher, html_to_text

from .stats import machine, ratio

JOBS = 8
PAGES = 32
#: The server's time over each page in the last two rows, seconds.
SERVER_TIME = 0.02

Convert = Callable[[str], str] | None
SLOW_PLAIN = "plain httpx, one shared client, 20 ms server"


def start_server(cert_dir: Path) -> tuple[subprocess.Popen[str], int]:
    """The HTTPS server in its own process; returns it and its port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.tls_server", str(cert_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def urls(port: int, tag: str, delay: float = 0.0) -> list[list[str]]:
    return [
        [f"https://localhost:{port}/page?n={tag}-{j}-{i}&delay={delay}" for i in range(PAGES)]
        for j in range(JOBS)
    ]


async def plain(
    port: int, tls: ssl.SSLContext, tag: str, convert: Convert, delay: float = 0.0
) -> float:
    """Pages/s of 8 tasks sharing one client, each fetching its pages in turn."""
    async with httpx.AsyncClient(verify=tls, trust_env=False) as client:

        async def one(job: list[str]) -> None:
            for url in job:
                response = await client.get(url)
                response.raise_for_status()
                text = response.text
                if convert is not None:
                    convert(text)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for job in urls(port, tag, delay):
                nursery.start_soon(one, job)
        return JOBS * PAGES / (time.perf_counter() - start)


async def batch(
    port: int,
    tls: ssl.SSLContext,
    tag: str,
    mode: str,
    per_host: int,
    db: Path,
    delay: float = 0.0,
) -> float:
    """Pages/s of 8 jobs of 32 targets through open_runner + HttpFetcher on a SQLite file."""
    fetcher = HttpFetcher(verify=tls, trust_env=False, per_host_concurrency=per_host)
    options = Options(mode=mode)
    store = Store.open(str(db))
    try:
        async with open_runner(store, fetcher, Config(jobs_total=JOBS)) as runner:
            start = time.perf_counter()
            ids = [
                (await runner.submit(f"c{j}", "bench", [Target(u, options) for u in job]))[0]
                for j, job in enumerate(urls(port, tag, delay))
            ]
            for job_id in ids:
                job = await runner.wait(job_id)
                assert job is not None and job.status is JobState.DONE, job
            return JOBS * PAGES / (time.perf_counter() - start)
    finally:
        store.close()


def measure(rounds: int) -> dict[str, Any]:
    """Every row, ``rounds`` interleaved rounds; medians of figures and of in-round ratios."""
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_server(Path(tmp))
        try:
            tls = ssl.create_default_context(cafile=str(Path(tmp) / "ca.pem"))
            rows: dict[str, list[float]] = {}
            ratios: dict[str, list[float]] = {}
            sides: dict[str, Callable[[str], Awaitable[float]]] = {
                "plain httpx, one shared client": lambda t: plain(port, tls, t, None),
                "trio_batch raw, per-host 8": lambda t: batch(port, tls, t, "raw", 8, db(t)),
                "trio_batch raw, per-host 4 (default)": lambda t: batch(
                    port, tls, t, "raw", 4, db(t)
                ),
                "plain httpx + html_to_text": lambda t: plain(port, tls, t, html_to_text),
                "trio_batch mode: text, per-host 8": lambda t: batch(
                    port, tls, t, "text", 8, db(t)
                ),
                SLOW_PLAIN: lambda t: plain(port, tls, t, None, SERVER_TIME),
                "trio_batch raw, per-host 8, 20 ms server": lambda t: batch(
                    port, tls, t, "raw", 8, db(t), SERVER_TIME
                ),
            }

            def db(tag: str) -> Path:
                return Path(tmp) / f"{tag}.db"

            trio.run(plain, port, tls, "warm", None)  # the server's first handshake, imports
            for r in range(rounds):
                got: dict[str, float] = {}
                turn = list(sides.items())
                for name, side in turn if r % 2 == 0 else turn[::-1]:  # no side always first
                    got[name] = trio.run(side, f"r{r}-{len(got)}")
                    rows.setdefault(name, []).append(got[name])
                for name, value in got.items():
                    ratios.setdefault(name, []).append(ratio(value, got[_base(name)]))
        finally:
            proc.kill()
            proc.wait()
    return {
        "jobs": JOBS,
        "pages": PAGES,
        "rounds": rounds,
        "pages_per_s": {k: statistics.median(v) for k, v in rows.items()},
        "vs_plain": {k: statistics.median(v) for k, v in ratios.items()},
    }


def _base(name: str) -> str:
    """The plain row a row is compared with: the one with the same conversion and server."""
    if "20 ms server" in name:
        return SLOW_PLAIN
    return "plain httpx + html_to_text" if "text" in name else "plain httpx, one shared client"


def table(figures: dict[str, Any]) -> str:
    """The rows as a Markdown table."""
    lines = [
        machine(),
        f"End-to-end fetch, {figures['jobs']} jobs x {figures['pages']} pages over local "
        f"HTTPS (keep-alive), medians of {figures['rounds']} rounds",
        "",
        "| | pages/s | vs the plain loop |",
        "|---|---:|---:|",
    ]
    for name, value in figures["pages_per_s"].items():
        lines.append(f"| {name} | {value:.0f} | {figures['vs_plain'][name]:.2f}x |")
    lines.append("")
    lines.append("Goals: trio_batch raw >= 0.9x, mode: text >= 0.9x (each row vs the plain loop")
    lines.append("with the same conversion and server).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Measure and print the table (``--json`` prints the figures instead)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fetch")
    parser.add_argument("--quick", action="store_true", help="2 rounds instead of 4")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 4)
    figures = measure(rounds)
    print(json.dumps(figures, indent=2) if args.json else table(figures))


if __name__ == "__main__":
    main()
