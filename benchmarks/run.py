"""Run the benchmarks: ``python -m benchmarks.run [--quick] [--rounds N] [--out DIR]``.

Every measurement runs once per round, rounds are interleaved (round 1 measures everything,
then round 2, ...), and each figure is the median over rounds. Ratios are taken within a round
(so both sides saw the same machine state) and their median is reported. Heartbeat lateness is
pooled over all rounds. ``make bench`` runs the full sizes, ``make bench-quick`` the reduced ones.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trio_batch import Config

from . import floor, history, memory, minimal, peers, report, workloads
from .stats import micros, percentile

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each measurement does."""

    rounds: int
    floor_targets: int
    serial_jobs: int
    concurrent_jobs_per_caller: int
    latency_samples: int
    history_rows: int
    lock_hold_seconds: float
    idle_seconds: float
    rss_small: int
    rss_large: int
    huey_items: int
    dbos_items: int
    targets_per_job: int = 32


FULL = Sizes(
    rounds=7,
    floor_targets=10_000,
    serial_jobs=100,
    concurrent_jobs_per_caller=25,
    latency_samples=200,
    history_rows=1_000_000,
    lock_hold_seconds=2.0,
    idle_seconds=1.0,
    rss_small=1_000,
    rss_large=100_000,
    huey_items=3_000,
    dbos_items=500,
)
QUICK = Sizes(
    rounds=3,
    floor_targets=3_000,
    serial_jobs=30,
    concurrent_jobs_per_caller=8,
    latency_samples=60,
    history_rows=100_000,
    lock_hold_seconds=2.0,
    idle_seconds=0.5,
    rss_small=1_000,
    rss_large=10_000,
    huey_items=1_000,
    dbos_items=200,
)


class Recorder:
    """Per-round figures, pooled samples and notes of one run."""

    def __init__(self) -> None:
        self.rounds: dict[str, list[float]] = {}
        self.pooled: dict[str, list[float]] = {}
        self.notes: list[str] = []
        self.extra: dict[str, Any] = {}

    def add(self, name: str, value: float) -> None:
        self.rounds.setdefault(name, []).append(value)

    def pool(self, name: str, values: list[float]) -> None:
        self.pooled.setdefault(name, []).extend(values)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            print(f"note: {text}", file=sys.stderr)


class Scratch:
    """Fresh database paths in a temporary directory, removed once used."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._n = 0

    @contextlib.contextmanager
    def db(self, name: str, source: Callable[[], str] | None = None) -> Iterator[str]:
        """A fresh database path (a copy from ``source()`` if given), deleted afterwards."""
        self._n += 1
        path = source() if source is not None else str(self.directory / f"{name}-{self._n}.db")
        try:
            yield path
        finally:
            for suffix in ("", "-wal", "-shm", "-runner.lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path + suffix)


def _latency(rec: Recorder, prefix: str, submit: list[float], status: list[float]) -> None:
    for what, samples in (("submit", submit), ("status", status)):
        rec.add(f"{prefix}{what}.p50_us", micros(percentile(samples, 50)))
        rec.add(f"{prefix}{what}.p99_us", micros(percentile(samples, 99)))


def _in_turn(r: int, *steps: Callable[[], None]) -> None:
    """Run measurements back to back, in reverse order on odd rounds, so that a drift of the
    machine's speed does not systematically favour one side of a ratio."""
    for step in steps if r % 2 == 0 else steps[::-1]:
        step()


def run_round(
    sizes: Sizes, rec: Recorder, scratch: Scratch, hist: history.HistoryCache, r: int
) -> None:
    """One round: every measurement once."""
    per_job = sizes.targets_per_job
    # The history copy is made first and flushed, so its write-back does not land in a timing.
    with scratch.db("history", hist.copy) as hist_path:
        os.sync()
        gc.collect()

        def floor_() -> None:
            with scratch.db("floor") as path:
                rec.add(
                    "floor.targets_per_s",
                    floor.floor_throughput(
                        path, targets=sizes.floor_targets, targets_per_job=per_job
                    ),
                )

        def serial(name: str = "serial.targets_per_s") -> None:
            with scratch.db("serial") as path:
                rec.add(
                    name,
                    workloads.measure_serial(
                        path, jobs=sizes.serial_jobs, targets_per_job=per_job, tag=f"s{r}"
                    ),
                )

        def traced() -> None:
            # Tracing on, as serve --otel sets it up; then without the store calls' spans.
            for name, store_spans in (("traced", True), ("traced_no_store", False)):
                tracing = workloads.sdk_tracing(store_spans=store_spans)
                if tracing is None:
                    rec.note("opentelemetry-sdk is not installed: the traced rows are skipped")
                    return
                with scratch.db(name) as path:
                    rec.add(
                        f"{name}.serial.targets_per_s",
                        workloads.measure_serial(
                            path,
                            jobs=sizes.serial_jobs,
                            targets_per_job=per_job,
                            tag=f"{name}{r}",
                            tracing=tracing,
                        ),
                    )

        def concurrent(heartbeat: bool) -> None:
            with scratch.db("concurrent") as path:
                got = workloads.measure_concurrent(
                    path,
                    jobs_per_caller=sizes.concurrent_jobs_per_caller,
                    targets_per_job=per_job,
                    heartbeat=heartbeat,
                    tag=f"c{r}{heartbeat}",
                )
            if heartbeat:
                rec.add("concurrent_heartbeat.targets_per_s", got.targets_per_s)
                rec.pool("lateness.concurrent", got.lateness)
            else:
                rec.add("concurrent.targets_per_s", got.targets_per_s)

        def least(callers: int) -> None:
            # The least trio code that keeps the same guarantees: how far trio_batch could go.
            with scratch.db("minimal") as path:
                jobs = sizes.serial_jobs if callers == 1 else sizes.concurrent_jobs_per_caller
                name = "serial" if callers == 1 else "concurrent"
                rec.add(
                    f"minimal.{name}.targets_per_s",
                    minimal.measure(path, callers=callers, jobs=jobs, targets_per_job=per_job),
                )

        def cycle(callers: int) -> None:
            # The embedding program's loop (targets built in it), beside least() in each round.
            with scratch.db("cycle") as path:
                jobs = sizes.serial_jobs if callers == 1 else sizes.concurrent_jobs_per_caller
                name = "serial" if callers == 1 else "concurrent"
                rec.add(
                    f"cycle.{name}.targets_per_s",
                    workloads.measure_cycle(
                        path,
                        callers=callers,
                        jobs_per_caller=jobs,
                        targets_per_job=per_job,
                        tag=f"y{r}",
                    ),
                )

        _in_turn(
            r,
            floor_,
            serial,
            traced,
            lambda: concurrent(False),
            lambda: least(1),
            lambda: cycle(1),
            lambda: least(Config().jobs_total),
            lambda: cycle(Config().jobs_total),
        )
        concurrent(True)
        with scratch.db("idle") as path:
            rec.pool(
                "lateness.idle", workloads.measure_idle_heartbeat(path, seconds=sizes.idle_seconds)
            )

        # Latency: the runner's calls, then the same SQL on a raw connection.
        def latency(prefix: str, path: str, settle: bool = False) -> None:
            lat = workloads.measure_latency(
                path,
                samples=sizes.latency_samples,
                targets_per_job=per_job,
                tag=f"l{r}{prefix}",
                settle=settle,
            )
            _latency(rec, prefix, lat.submit, lat.status)
            raw = floor.raw_latency(path, samples=sizes.latency_samples, targets_per_job=per_job)
            _latency(rec, f"{prefix}raw_", raw.submit, raw.status)

        def empty() -> None:
            serial("serial_beside_history.targets_per_s")  # the history ratio's own neighbour
            with scratch.db("latency") as path:
                latency("", path)

        def with_history() -> None:
            # Opened as after a restart: the runner purges the lapsed half in the background
            # while it serves. Then again once that purge has finished ("settled").
            def serial_on_history(settle: bool) -> float:
                return workloads.measure_serial(
                    hist_path,
                    jobs=sizes.serial_jobs,
                    targets_per_job=per_job,
                    tag=f"hs{r}{settle}",
                    settle=settle,
                )

            rec.add("history.serial.targets_per_s", serial_on_history(False))
            latency("history.", hist_path)
            rec.add("settled.serial.targets_per_s", serial_on_history(True))
            latency("settled.", hist_path, settle=True)

        _in_turn(r, empty, with_history)

    # A second process holds the write lock while 8 jobs run.
    with scratch.db("lock") as path:
        held = workloads.measure_under_lock(
            path, hold_seconds=sizes.lock_hold_seconds, targets_per_job=per_job, tag=f"k{r}"
        )
        rec.pool("lateness.lock_run", held.lateness)
        rec.pool("lateness.lock_held", held.lateness_held)
        rec.add("lock.held_seconds", held.held_seconds)
        rec.add("lock.targets_during_hold", held.targets_during_hold)
        rec.add("lock.jobs_done", held.jobs)

    for peer, items in (("huey", sizes.huey_items), ("dbos", sizes.dbos_items)):
        if not peers.installed(peer):
            rec.note(f"{peer} is not installed (pip install -e '.[bench]'): skipped")
            continue
        run = peers.measure_peer(peer, items=items, directory=scratch.directory)
        rec.add(f"{peer}.items_per_s", run.items_per_s)
        rec.extra[f"{peer}.pragmas"] = {
            "journal_mode": run.journal_mode,
            "synchronous": run.synchronous,
        }


def run_memory(sizes: Sizes, rec: Recorder, scratch: Scratch) -> None:
    """Peak RSS after a small and a large number of targets, each in a fresh process."""
    for name, targets in (("small", sizes.rss_small), ("large", sizes.rss_large)):
        with scratch.db(f"rss-{name}") as path:
            got = memory.measure_rss(path, targets=targets, targets_per_job=sizes.targets_per_job)
        rec.extra[f"memory.{name}"] = {"targets": targets, **got}


def run(sizes: Sizes, *, mode: str, command: str, out: Path | None) -> dict[str, Any]:
    """Run every measurement; write the JSON and chart to ``out`` (if given); return results."""
    rec = Recorder()
    started = time.perf_counter()
    rec.extra["load_average.start"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="trio-batch-bench-") as tmp:
        scratch = Scratch(Path(tmp))
        hist = history.HistoryCache(Path(tmp), target_rows=sizes.history_rows)
        hist.copy()  # build it before the first round so no round pays for it
        print(
            f"built {sizes.history_rows:,} history rows in {hist.build_seconds:.1f} s",
            file=sys.stderr,
        )
        for r in range(sizes.rounds):
            t0 = time.perf_counter()
            run_round(sizes, rec, scratch, hist, r)
            print(
                f"round {r + 1}/{sizes.rounds} done in {time.perf_counter() - t0:.1f} s",
                file=sys.stderr,
            )
        run_memory(sizes, rec, scratch)
        rec.extra["history.build_seconds"] = hist.build_seconds
    rec.extra["load_average.end"] = os.getloadavg()
    results = report.assemble(
        rec.rounds,
        rec.pooled,
        rec.extra,
        notes=rec.notes,
        sizes=dataclasses.asdict(sizes),
        mode=mode,
        command=command,
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        seconds=time.perf_counter() - started,
    )
    print(report.render(results))
    if out is not None:
        stem = "latest" if mode == "full" else "quick"
        written = report.write(results, out, stem)
        print("\n" + "\n".join(f"wrote {p}" for p in written))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="reduced sizes, under a minute")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where JSON and PNG go")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.rounds:
        sizes = dataclasses.replace(sizes, rounds=args.rounds)
    command = "make bench-quick" if args.quick else "make bench"
    if args.rounds:
        command = f"python -m benchmarks.run {' '.join(sys.argv[1:] if argv is None else argv)}"
    run(sizes, mode="quick" if args.quick else "full", command=command, out=args.out)


if __name__ == "__main__":
    main()
