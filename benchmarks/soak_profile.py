"""Where the soak's loop time goes: a pytest plugin around ``tests/http/test_load.py``.

``TRIO_BATCH_SOAK=1 .venv/bin/python -m pytest tests/http/test_load.py -q -s -p
benchmarks.soak_profile`` runs the soak with :class:`LoopProfile` installed in its trio run,
and prints (lines starting ``PROF``) how long the scheduler's passes took, the loop thread's
wall and CPU time per kind of task step, what filled the windows of the heartbeat's late
beats, what the passes over 1 ms held, the submitters' steps by where they resumed and where
they stopped, how long the thread waited for a CPU (Linux ``schedstat``), and the SQLite
store's admission reads (``Store.admission_row``, on any thread). The figures of
``docs/explanation/performance.md`` on the soak were taken with it. Timing every step costs
the loop some µs a step: compare runs with it only against runs with it.
"""

from __future__ import annotations

import bisect
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import trio

__all__ = ["LoopProfile"]

#: A pass over this long (seconds) is a long one, and a beat this late a late one.
LONG = 0.001
#: The heartbeat's period in tests/http/test_load.py: a beat is due this long after its step.
BEAT = 0.001


def _run_delay() -> float:
    """Seconds this thread has waited for a CPU, or 0.0 where Linux's schedstat is missing."""
    try:
        with open("/proc/thread-self/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except OSError:
        return 0.0


def _kind(task: trio.lowlevel.Task) -> str:
    name = task.name
    for kind in ("submitter", "drain", "sampler", "heartbeat"):
        if name.endswith(kind) or f" {kind} " in f" {name} ":
            return kind
    return "test" if "test_hundreds" in name else name.rsplit(".", 1)[-1][:24]


def _where(task: trio.lowlevel.Task) -> str:
    """The innermost frame outside trio the task is suspended in: ``function:line``."""
    where = "?"
    for frame, line in task.iter_await_frames():
        if "/trio/" not in frame.f_code.co_filename:
            where = f"{frame.f_code.co_name}:{line}"
    return where


_K = TypeVar("_K")


def _most(totals: dict[_K, float], n: int) -> list[tuple[_K, float]]:
    """The ``n`` largest of ``totals``, largest first."""
    return sorted(totals.items(), key=lambda item: item[1], reverse=True)[:n]


class LoopProfile(trio.abc.Instrument):
    """The loop thread's time cut into segments: task steps (by kind), the scheduler's own
    work between them (``sched``), and waits for I/O (``io``; ``io0`` when not allowed to
    sleep). Install it with ``trio.lowlevel.add_instrument``, then :meth:`report`."""

    def __init__(self) -> None:
        self.segments: list[tuple[float, float, str, float]] = []  # start, end, kind, cpu
        self._mark, self._mark_cpu = time.perf_counter(), time.thread_time()
        self._began, self._delay = self._mark, _run_delay()
        self.passes: list[float] = []
        self._pass_began: float | None = None
        self._pass: defaultdict[str, float] = defaultdict(float)
        self.long_passes: defaultdict[str, float] = defaultdict(
            float
        )  # what the long passes held, seconds
        self.beats: list[tuple[float, float]] = []  # (due, woke)
        self._beat_ended: float | None = None
        self.steps: defaultdict[tuple[str, str], float] = defaultdict(
            float
        )  # submitter steps: (from, to) -> s
        self.step_counts: Counter[tuple[str, str]] = Counter()
        self._from = "?"

    def _segment(self, kind: str) -> tuple[float, float]:
        now, cpu = time.perf_counter(), time.thread_time()
        began = self._mark
        self.segments.append((began, now, kind, cpu - self._mark_cpu))
        self._mark, self._mark_cpu = now, cpu
        return began, now

    def before_io_wait(self, timeout: float) -> None:
        """A pass ends."""
        self._segment("sched")
        if self._pass_began is not None:
            took = time.perf_counter() - self._pass_began
            self.passes.append(took)
            if took > LONG:
                for kind, seconds in self._pass.items():  # summed: update() would replace
                    self.long_passes[kind] += seconds
        self._pass = defaultdict(float)

    def after_io_wait(self, timeout: float) -> None:
        """A pass begins."""
        self._segment("io" if timeout > 0 else "io0")
        self._pass_began = time.perf_counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        """Note where a submitter resumes, and when a beat wakes."""
        self._segment("sched")
        kind = _kind(task)
        if kind == "submitter":
            self._from = _where(task)
        elif kind == "heartbeat" and self._beat_ended is not None:
            self.beats.append((self._beat_ended + BEAT, self._mark))

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        """Time the step, by kind (a submitter's by where it resumed and stopped)."""
        kind = _kind(task)
        began, ended = self._segment(kind)
        if kind == "submitter":
            step = (self._from, _where(task))
            self.steps[step] += ended - began
            self.step_counts[step] += 1
            self._pass[f"{step[0]} -> {step[1]}"] += ended - began
        else:
            self._pass[kind] += ended - began
        if kind == "heartbeat":
            self._beat_ended = ended

    def report(self, write: Callable[[str], Any] = print) -> None:
        """Print the figures, each line starting ``PROF``."""
        wall = time.perf_counter() - self._began
        waited = _run_delay() - self._delay
        ordered = sorted(self.passes) or [0.0]
        ms = [1000 * ordered[min(len(ordered) - 1, int(f * len(ordered)))] for f in (0.5, 0.99)]
        long = [p for p in ordered if p > LONG]
        write(f"PROF {wall:.2f} s, {len(self.passes)} passes: p50 {ms[0]:.3f} ms, p99 {ms[1]:.3f}")
        write(
            f"PROF passes over 1 ms: {len(long)}, {sum(long):.2f} s; waited for a CPU {waited:.2f}"
        )
        walls: defaultdict[str, float] = defaultdict(float)
        cpus: defaultdict[str, float] = defaultdict(float)
        counts: Counter[str] = Counter()
        for began, ended, kind, cpu in self.segments:
            walls[kind] += ended - began
            cpus[kind] += cpu
            counts[kind] += 1
        for kind, took in _most(walls, 10):
            write(
                f"PROF   {kind:14s} wall {took:6.3f} s, CPU {cpus[kind]:6.3f} s, {counts[kind]:7d} "
                f"segments, {1e6 * took / counts[kind]:6.1f} µs each"
            )
        self._report_beats(write)
        write(f"PROF what a pass over 1 ms held, µs on average ({len(long)} passes):")
        for kind, took in _most(self.long_passes, 12):
            write(f"PROF   {1e6 * took / max(1, len(long)):7.1f}  {kind}")
        write("PROF submitter steps, resumed -> stopped: seconds, steps, µs each")
        for step, took in _most(self.steps, 12):
            n = self.step_counts[step]
            write(f"PROF   {took:6.3f} s {n:7d} {1e6 * took / n:6.1f} µs  {step[0]} -> {step[1]}")

    def _report_beats(self, write: Callable[[str], Any]) -> None:
        """Each beat's window (due to woken): the loop thread's CPU in it, and the rest."""
        starts = [began for began, *_ in self.segments]
        on_cpu: list[float] = []
        for due, woke in self.beats:
            i, used = max(0, bisect.bisect_right(starts, due) - 1), 0.0
            while i < len(self.segments) and self.segments[i][0] < woke:
                began, ended, kind, cpu = self.segments[i]
                overlap = min(ended, woke) - max(began, due)
                if overlap > 0 and ended > began and not kind.startswith("io"):
                    used += min(cpu, ended - began) * overlap / (ended - began)
                i += 1
            on_cpu.append(used)
        if not on_cpu:
            return
        lags = sorted(woke - due for due, woke in self.beats)
        cpu_sorted = sorted(on_cpu)
        rest = sorted((woke - due) - c for (due, woke), c in zip(self.beats, on_cpu, strict=True))
        p99 = int(0.99 * len(lags))
        write(
            f"PROF {len(lags)} beats, lag p99 {1000 * lags[p99]:.2f} ms; in each beat's window "
            f"the loop's CPU p99 {1000 * cpu_sorted[p99]:.2f} ms, the rest (off a CPU: other "
            f"processes, this one's threads) p99 {1000 * rest[p99]:.2f} ms"
        )


class _Timed:
    """Calls of one method: how many, and their wall time (:meth:`wrapper` stands in for it)."""

    def __init__(self, method: Callable[..., Any]) -> None:
        self.method, self.calls, self.seconds = method, 0, 0.0

    def wrapper(self) -> Callable[..., Any]:
        """A function (so bound as a method is) that times each call."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return self.method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - began
                self.calls += 1

        return timed


def pytest_collection_finish(session: pytest.Session) -> None:
    """Wrap the soak's run in a :class:`LoopProfile`, and time the admission reads."""
    load = sys.modules.get("tests.http.test_load")
    if load is None:
        return
    from trio_batch.store.sqlite._store import Store

    run = load._run_the_load

    async def profiled(*args: Any) -> None:
        profile, reads = LoopProfile(), _Timed(Store.admission_row)
        Store.admission_row = reads.wrapper()  # type: ignore[method-assign]
        trio.lowlevel.add_instrument(profile)
        try:
            await run(*args)
        finally:
            trio.lowlevel.remove_instrument(profile)
            Store.admission_row = reads.method  # type: ignore[method-assign]
            profile.report(lambda line: print(line, file=sys.stderr))
            each = 1e6 * reads.seconds / max(1, reads.calls)
            print(f"PROF admission reads {reads.calls}, {each:.1f} µs each", file=sys.stderr)

    setattr(load, "_run_the_load", profiled)  # noqa: B010 (tests/ is not typed)
