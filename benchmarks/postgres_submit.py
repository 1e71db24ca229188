"""CPU per submit on PostgreSQL, client and server: ``python -m benchmarks.postgres_submit
[--placement P] [--calls N] [--targets K]``.

The store's own ``PostgresStore.create_job`` in a loop on one connection (no runner, no
store thread): ``created``, jobs of K plain targets accepted (each of a new caller: no
reuse); ``refused``, the same refused with ``Busy`` (every job slot taken), as most submits
are under load. Each counted as :mod:`benchmarks.postgres_cpu` counts a window (the process's
CPU, every server process's), after a warm-up; one line per row. For an A/B, run it in fresh
processes, trees alternated.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence

from trio_batch import Busy, Target
from trio_batch.store import NewJob
from trio_batch.store.postgres import PostgresStore

from .placement import PLACEMENTS
from .postgres import fresh_database
from .postgres_cpu import Meter, counted_server

_WARMUP = 50
#: Job slots (``jobs_total``) of the refused row, all taken.
_SLOTS = 8


def _submits(targets: list[Target], callers: range, jobs_total: int) -> list[NewJob]:
    size, many = len(targets), 10**9
    return [
        NewJob(f"c{n}", "u", targets, 1e6, size, jobs_per_caller=many, jobs_total=jobs_total)
        for n in callers
    ]


def _window(store: PostgresStore, meter: Meter, submits: Sequence[NewJob]) -> tuple[float, float]:
    """Client and server µs per ``create_job`` of each of ``submits``."""
    meter.start()
    for submit in submits:
        with contextlib.suppress(Busy):
            store.create_job(submit, now=1e9)
    window = meter.stop(jobs=len(submits), targets=len(submits))
    return window.client / len(submits) * 1e6, window.server / len(submits) * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.postgres_submit", description=__doc__
    )
    parser.add_argument("--placement", choices=PLACEMENTS, default="one-core")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--targets", type=int, default=32)
    args = parser.parse_args(argv)
    server = counted_server(args.placement)
    try:
        meter = Meter(server)
        targets = [Target(f"https://submit.test/{i}") for i in range(args.targets)]
        n = args.calls
        rows = {
            "created": (_submits(targets, range(n, n + _WARMUP), 10**9),
                        _submits(targets, range(n + _WARMUP, 2 * n + _WARMUP), 10**9)),
            "refused": (_submits(targets, range(n, n + _WARMUP), _SLOTS),
                        _submits(targets, range(n), _SLOTS)),
        }  # fmt: skip
        for row, (warmup, measured) in rows.items():
            store = PostgresStore.open(fresh_database(server))
            for taken in _submits(targets, range(-_SLOTS, 0), 10**9):
                store.create_job(taken, now=1e9)  # the slots the refused row finds taken
            _window(store, meter, warmup)
            client, server_cpu = _window(store, meter, measured)
            store.close(final=True)
            line = f"client {client:6.1f} µs  server {server_cpu:6.1f} µs"
            print(f"{row:8} {args.targets} targets  {line}")
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
