"""PostgreSQL under pressure: ``python -m benchmarks.pg_pressure [--quick]``.

One embedding runner on a throw-away local server (demo/local_postgres.py) drives a steady
load: 16 callers, each submitting a job of 4 targets whose fetch sleeps 2 ms, waiting for it
(``runner.wait``) and submitting the next. Three scenarios, each between two baselines of its
own (the rate just before it and again once it has recovered, averaged: a shared machine's
load drifts) measured in the same run on the same runner, so each figure is a ratio within
one run (``--only NAME`` runs some of them):

- **kills**: every backend of the runner (``application_name`` trio_batch) terminated with
  ``pg_terminate_backend`` twice a second; the rate during the kills, and the longest stretch
  without a completion;
- **held xmin**: an idle transaction that took a transaction id (``BEGIN; SELECT
  txid_current()``) held open; the rate in the hold's second half, and how much the store's
  tables (with their indexes and TOAST) grew over the hold, in all and per job, table by
  table;
- **connections exhausted**: ``max_connections`` filled by a hog, which cuts whatever
  connection the runner gets every 0.5 s; the longest stretch without a completion while it
  lasts, and the rate once it is released.

The load, the pressures and the checks of what the store holds afterwards are shared with the
suite's scenarios (tests/runner/test_postgres_pressure.py), which run them at small sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import trio

from demo.local_postgres import start_postgres
from trio_batch import (
    BatchError,
    Config,
    JobState,
    JobStore,
    Result,
    Runner,
    Target,
    open_runner,
    open_store,
)

from .stats import machine, ratio

__all__ = [
    "Hog",
    "Killer",
    "Load",
    "Pressure",
    "Relation",
    "applied",
    "growth",
    "held_xmin",
    "relations",
    "store_problems",
    "total_bytes",
]

#: The load: callers, targets per job, the fetch's sleep.
CALLERS = 16
TARGETS = 4
FETCH_SLEEP = 0.002
#: The runner's bound on a store call in these scenarios.
STORE_TIMEOUT = 2.0
#: The backends of a runner, as ``pg_stat_activity`` names them.
APPLICATION = "trio_batch%"


async def sleepy_fetch(target: Target) -> Result:
    """The load's fetch: a 2 ms sleep, an empty result."""
    await trio.sleep(FETCH_SLEEP)
    return Result("")


def pressure_config(**changes: Any) -> Config:
    """The runner's configuration for the load: room for every caller's job at once."""
    values: dict[str, Any] = {
        "jobs_total": 4 * CALLERS,
        "store_timeout": STORE_TIMEOUT,
        "poll_interval": 0.5,
    }
    values.update(changes)
    return Config(**values)


@dataclass
class Load:
    """``callers`` callers, each submitting a job of ``targets`` targets and waiting for it,
    over and over, until :meth:`stop` (or each has run ``jobs_per_caller``).

    Records the trio time of every completion, the status each caller saw each job end with,
    and the typed errors (:class:`BatchError`) callers were given; any other error ends the
    run. A caller given an error sleeps ``pause`` before its next submit.
    """

    runner: Runner
    callers: int = CALLERS
    targets: int = TARGETS
    jobs_per_caller: int | None = None
    pause: float = 0.05
    #: Trio time of each job seen to end.
    completions: list[float] = field(default_factory=list)
    #: Each job a caller saw end, with the status it saw.
    seen: dict[str, JobState] = field(default_factory=dict)
    #: The typed errors the callers were given (submit or wait).
    errors: list[BatchError] = field(default_factory=list)
    #: How long each call that failed took, in seconds of trio time.
    failed_after: list[float] = field(default_factory=list)
    _stopping: bool = False
    _changed: trio.Event = field(default_factory=trio.Event)

    def _change(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, ready: Callable[[], bool]) -> None:
        """Return once ``ready()``, asked again at each job that ends and each error."""
        while not ready():
            await self._changed.wait()

    def stop(self) -> None:
        """Let every caller finish the job it waits for, and submit no more."""
        self._stopping = True

    async def run(self) -> None:
        """Run every caller to its end (see :meth:`stop`)."""
        async with trio.open_nursery() as nursery:
            for c in range(self.callers):
                nursery.start_soon(self._caller, c)

    async def _caller(self, c: int) -> None:
        n = 0
        while not self._stopping and (self.jobs_per_caller is None or n < self.jobs_per_caller):
            n += 1
            targets = [Target(f"https://load.test/{c}/{n}/{i}") for i in range(self.targets)]
            start = trio.current_time()
            try:
                job_id, _ = await self.runner.submit(f"caller{c}", "load", targets)
                job = await self.runner.wait(job_id)
            except BatchError as exc:
                self.errors.append(exc)
                self.failed_after.append(trio.current_time() - start)
                self._change()
                await trio.sleep(self.pause)
                continue
            assert job is not None
            self.seen[job.id] = job.status
            self.completions.append(trio.current_time())
            self._change()

    def between(self, start: float, end: float) -> int:
        """Completions from ``start`` to ``end`` (trio time)."""
        return sum(1 for t in self.completions if start <= t < end)

    def longest_gap(self, start: float, end: float) -> float:
        """The longest stretch from ``start`` to ``end`` without a completion, in seconds."""
        times = [start, *(t for t in self.completions if start <= t < end), end]
        return max(b - a for a, b in itertools.pairwise(times))


# ---------------------------------------------------------------------------------------------
# The pressures, each on threads of its own with connections of its own


_KILL = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE application_name LIKE %s AND datname = current_database() AND pid <> pg_backend_pid()"
)


def _connect(dsn: str, name: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, application_name=f"pressure {name}")


class Pressure:
    """A pressure on ``dsn``'s server, applied in rounds every ``interval`` seconds on a
    thread of its own while :meth:`running`'s block lasts. :attr:`rounds` counts the rounds
    that found the runner connected and cut it off (see :attr:`every_round_counts`);
    :meth:`wait_rounds` waits for them."""

    name = "pressure"
    #: Whether a round counts in :attr:`rounds` even if the runner was not connected.
    every_round_counts = False

    def __init__(self, dsn: str, *, interval: float = 0.5) -> None:
        self.dsn = dsn
        self.interval = interval
        #: The runner's backends terminated so far.
        self.kills = 0
        self.rounds = 0
        self._round_done = threading.Condition()
        self._stop = threading.Event()

    def _start(self) -> psycopg.Connection[Any]:
        """Set the pressure up; the connection the rounds run on."""
        return _connect(self.dsn, self.name)

    def _round(self, conn: psycopg.Connection[Any]) -> None:
        """Cut the runner's connections (and take their place, for a hog)."""
        killed = sum(1 for (ok,) in conn.execute(_KILL, (APPLICATION,)).fetchall() if ok)
        with self._round_done:
            self.kills += killed
            self.rounds += killed > 0 or self.every_round_counts
            self._round_done.notify_all()

    def _end(self) -> None:
        """Take the pressure off."""

    def _run(self, conn: psycopg.Connection[Any]) -> None:
        while not self._stop.is_set():
            self._round(conn)
            self._stop.wait(self.interval)

    def wait_rounds(self, rounds: int) -> None:
        """Return once :attr:`rounds` reaches ``rounds`` (call it on a thread)."""
        with self._round_done:
            self._round_done.wait_for(lambda: self.rounds >= rounds)

    @contextlib.contextmanager
    def running(self) -> Iterator[Pressure]:
        """Apply the pressure for the block."""
        conn = self._start()
        thread = threading.Thread(target=self._run, args=(conn,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
            conn.close()
            self._end()


class Killer(Pressure):
    """Terminates every backend named :data:`APPLICATION` in ``dsn``'s database every
    ``interval`` seconds."""

    name = "killer"


class Hog(Pressure):
    """Fills the server's ``max_connections`` with idle connections of its own, and every
    ``interval`` cuts whatever connections the runner got meanwhile and takes their place.
    Every round counts: the runner may not get one at all."""

    name = "hog"
    every_round_counts = True

    def __init__(self, dsn: str, *, interval: float = 0.5) -> None:
        super().__init__(dsn, interval=interval)
        self.held: list[psycopg.Connection[Any]] = []

    def _fill(self) -> None:
        with contextlib.suppress(psycopg.OperationalError):  # full: "too many clients"
            while True:
                self.held.append(_connect(self.dsn, self.name))

    def _start(self) -> psycopg.Connection[Any]:
        conn = super()._start()
        self._fill()
        return conn

    def _round(self, conn: psycopg.Connection[Any]) -> None:
        super()._round(conn)
        self._fill()

    def _end(self) -> None:
        for conn in self.held:
            conn.close()
        self.held.clear()


@contextlib.asynccontextmanager
async def applied(pressure: Pressure) -> AsyncIterator[Pressure]:
    """``pressure`` applied for the block, from trio: set up and taken off on a worker thread
    (a hog opens hundreds of connections). Cancellation: taking it off completes."""
    stack = contextlib.ExitStack()
    await trio.to_thread.run_sync(stack.enter_context, pressure.running())
    try:
        yield pressure
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(stack.close)


@contextlib.contextmanager
def held_xmin(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An idle transaction holding the database's xmin for the block (it took a transaction
    id, as a writer that stopped mid-way does); rolled back at the end."""
    conn = psycopg.connect(dsn, application_name="pressure xmin holder")
    try:
        conn.execute("SELECT txid_current()")
        yield conn
    finally:
        conn.rollback()
        conn.close()


@dataclass(frozen=True)
class Relation:
    """One table's size (with its TOAST), each of its indexes' sizes, and its row counters."""

    table: int
    indexes: dict[str, int]
    updates: int
    hot_updates: int
    dead: int


def relations(dsn: str) -> dict[str, Relation]:
    """Every table of the store's schema by name. The counters are the statistics the
    server's backends have flushed (each does at most once a second)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT relname, pg_table_size(relid), n_tup_upd, n_tup_hot_upd, n_dead_tup "
            "FROM pg_stat_user_tables WHERE schemaname = current_schema()"
        ).fetchall()
        indexes = conn.execute(
            "SELECT relname, indexrelname, pg_relation_size(indexrelid) "
            "FROM pg_stat_user_indexes WHERE schemaname = current_schema()"
        ).fetchall()
    return {
        name: Relation(size, {i: n for t, i, n in indexes if t == name}, *counters)
        for name, size, *counters in tables
    }


def total_bytes(tables: dict[str, Relation]) -> int:
    """The bytes of ``tables``, with their indexes and TOAST."""
    return sum(r.table + sum(r.indexes.values()) for r in tables.values())


def growth(before: dict[str, Relation], after: dict[str, Relation], jobs: int) -> str:
    """What each table and each of its indexes grew by from ``before`` to ``after``, per job
    (bytes), and the share of its updates that were HOT; the tables that grew most first."""
    empty = Relation(0, {}, 0, 0, 0)
    lines = []
    for name, a in after.items():
        b = before.get(name, empty)
        grown = {i: (n - b.indexes.get(i, 0)) / jobs for i, n in a.indexes.items()}
        table = (a.table - b.table) / jobs
        updates, hot = a.updates - b.updates, a.hot_updates - b.hot_updates
        if not (table or any(grown.values()) or updates):
            continue
        each = ", ".join(f"{i} {n:.0f}" for i, n in sorted(grown.items(), key=lambda x: -x[1]))
        share = f"{hot / updates:.0%}" if updates else "-"
        lines.append(
            (
                table + sum(grown.values()),
                f"  {name}: {table + sum(grown.values()):.0f} B a job: table {table:.0f}, "
                f"indexes {sum(grown.values()):.0f} ({each}); {updates} updates, "
                f"{share} HOT; {a.dead - b.dead:+d} dead rows",
            )
        )
    return "\n".join(line for _, line in sorted(lines, reverse=True))


def store_problems(dsn: str, seen: dict[str, JobState]) -> list[str]:
    """What is wrong in the store after a clean exit: a job left live, ``targets_done`` unlike
    its stored outcomes, a ``done`` job with a target not done, a job a caller saw end stored
    with another status. Empty if nothing is."""
    problems: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT j.id, j.status, j.targets_done, j.targets_total, "
            "count(t.idx) FILTER (WHERE t.status <> 'pending'), "
            "count(t.idx) FILTER (WHERE t.status = 'done') "
            "FROM jobs AS j LEFT JOIN targets AS t ON t.job_id = j.id GROUP BY j.id"
        ).fetchall()
    stored = {row[0]: row[1] for row in rows}
    for job_id, status, done, total, outcomes, targets_ok in rows:
        if status in ("queued", "running"):
            problems.append(f"{job_id} left {status}")
        if done != outcomes:
            problems.append(f"{job_id}: targets_done {done}, {outcomes} outcomes stored")
        if status == "done" and targets_ok != total:
            problems.append(f"{job_id} done with {targets_ok} of {total} targets done")
    for job_id, status in seen.items():
        if stored.get(job_id) != status.value:
            problems.append(f"{job_id} seen {status.value}, stored {stored.get(job_id)}")
    return problems


# ---------------------------------------------------------------------------------------------
# The benchmark


@dataclass
class Figure:
    """One scenario's figures."""

    name: str
    baseline: float  # completions per second before it
    during: float  # completions per second under it (the measured part)
    longest_gap: float
    note: str = ""
    failures: int = 0
    slowest_failure: float = 0.0
    errors: str = ""
    #: Printed below the table.
    detail: str = ""


def _kinds(errors: list[BatchError]) -> str:
    """The errors' first lines, counted."""
    kinds: dict[str, int] = {}
    for exc in errors:
        line = f"{type(exc).__name__}: {str(exc)[:120]}"
        kinds[line] = kinds.get(line, 0) + 1
    return "; ".join(f"{n} x {line}" for line, n in kinds.items())


async def _phase(seconds: float) -> tuple[float, float]:
    start = trio.current_time()
    await trio.sleep(seconds)
    return start, trio.current_time()


def _rate(load: Load, span: tuple[float, float]) -> float:
    return load.between(*span) / (span[1] - span[0])


#: The scenarios, in the order they run.
SCENARIOS = ("kills", "held xmin", "connections exhausted")


async def _around(load: Load, seconds: float, pressure: Awaitable[Figure]) -> Figure:
    """``pressure``'s figure, its baseline the rate over ``seconds`` before it and again
    after it (once recovered): the machine's load drifts, a ratio to one side alone drifts
    with it."""
    before = await _phase(seconds)
    errors = len(load.errors)
    figure = await pressure
    figure.failures = len(load.errors) - errors
    figure.slowest_failure = max(load.failed_after[errors:], default=0.0)
    figure.errors = _kinds(load.errors[errors:])
    await trio.sleep(2.0)  # recover
    after = await _phase(seconds)
    figure.baseline = (_rate(load, before) + _rate(load, after)) / 2
    return figure


async def _kills(dsn: str, load: Load, seconds: float) -> Figure:
    async with applied(Killer(dsn)) as killer:
        during = await _phase(seconds)
    return Figure(
        "kills",
        0.0,
        _rate(load, during),
        load.longest_gap(*during),
        f"{killer.kills} backends killed",
    )


def _per_job(before: dict[str, Relation], after: dict[str, Relation], jobs: int) -> str:
    grown = total_bytes(after) - total_bytes(before)
    return f"+{grown / 2**20:.1f} MB over {jobs} jobs ({grown / max(jobs, 1) / 1024:.2f} KB a job)"


async def _held_xmin(dsn: str, load: Load, seconds: float) -> Figure:
    # The same work's growth without a hold first: what the rows written stay as anyway.
    free_start = await trio.to_thread.run_sync(relations, dsn)
    free = await _phase(seconds / 4)
    before = await trio.to_thread.run_sync(relations, dsn)
    with held_xmin(dsn):
        first = await _phase(seconds / 2)
        second = await _phase(seconds / 2)
        after = await trio.to_thread.run_sync(relations, dsn)
    jobs = max(load.between(first[0], second[1]), 1)
    return Figure(
        "held xmin",
        0.0,
        _rate(load, second),
        load.longest_gap(*second),
        f"second half; tables {_per_job(before, after, jobs)}; without a hold, "
        f"{_per_job(free_start, before, load.between(*free))}",
        detail=growth(before, after, jobs),
    )


async def _exhausted(dsn: str, load: Load, seconds: float, after_s: float) -> Figure:
    async with applied(Hog(dsn)) as hog:
        full = await _phase(seconds)
    after = await _phase(after_s)
    return Figure(
        "connections exhausted",
        0.0,
        _rate(load, after),
        load.longest_gap(*full),
        f"the rate once released; gap while full; {hog.kills} runner connections cut, "
        f"{load.between(*full)} jobs ended meanwhile",
    )


async def _scenarios(dsn: str, load: Load, quick: bool, only: Collection[str]) -> list[Figure]:
    base_s, kill_s, hold_s, hog_s = (3.0, 6.0, 12.0, 4.0) if quick else (5.0, 15.0, 40.0, 12.0)
    await trio.sleep(1.0)  # warm up
    pressures = {
        "kills": lambda: _kills(dsn, load, kill_s),
        "held xmin": lambda: _held_xmin(dsn, load, hold_s),
        "connections exhausted": lambda: _exhausted(dsn, load, hog_s, base_s),
    }
    return [await _around(load, base_s, pressures[name]()) for name in SCENARIOS if name in only]


def measure(
    dsn: str, *, quick: bool, only: Collection[str] = SCENARIOS
) -> tuple[list[Figure], list[str]]:
    """Run the three scenarios on one runner; their figures and the store's problems after."""
    # The outages' logs: the store's, and psycopg's about pipelines ended on a lost connection.
    logging.getLogger("trio_batch").setLevel(logging.CRITICAL)
    logging.getLogger("psycopg").setLevel(logging.ERROR)

    async def main() -> tuple[list[Figure], dict[str, JobState]]:
        store: JobStore = open_store(dsn, store_timeout=STORE_TIMEOUT)
        try:
            async with open_runner(store, sleepy_fetch, pressure_config()) as runner:
                load = Load(runner)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(load.run)
                    figures = await _scenarios(dsn, load, quick, only)
                    load.stop()
        finally:
            await store.aclose()
        return figures, load.seen

    figures, seen = trio.run(main)
    return figures, store_problems(dsn, seen)


def render(figures: list[Figure]) -> str:
    """The figures as a table: each scenario's rate beside its baseline."""
    lines = [
        "| scenario | baseline jobs/s | during jobs/s | ratio | longest gap | failed calls "
        "(slowest) | notes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for f in figures:
        lines.append(
            f"| {f.name} | {f.baseline:.0f} | {f.during:.0f} | {ratio(f.during, f.baseline):.2f}x "
            f"| {f.longest_gap:.2f} s | {f.failures} ({f.slowest_failure:.1f} s) | {f.note} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pg_pressure", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter phases")
    parser.add_argument(
        "--only", action="append", choices=SCENARIOS, help="run this scenario (repeatable)"
    )
    args = parser.parse_args(argv)
    server = start_postgres()
    try:
        dsn = server.create_database("pressure")
        started = time.monotonic()
        figures, problems = measure(dsn, quick=args.quick, only=args.only or SCENARIOS)
        with psycopg.connect(dsn) as conn:
            version = conn.info.parameter_status("server_version")
        print(render(figures))
        print(machine(version))
        for f in figures:
            if f.errors:
                print(f"{f.name}: {f.errors}")
            if f.detail:
                print(f"{f.name}, growth by table:\n{f.detail}")
        print(f"({time.monotonic() - started:.0f} s; store checked: {problems or 'consistent'})")
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
