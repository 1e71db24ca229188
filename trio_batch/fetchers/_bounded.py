"""Running body processing where it can be bounded and killed, shared fairly between callers.

Regular expressions, jq programs, HTML parsing and PDF extraction are CPU work that holds the
GIL and cannot be interrupted in a thread: one catastrophic pattern such as ``(.+)+Z`` would
freeze the event loop and every request beside it. So processing runs in a worker process
(trio-parallel) that trio kills when the target's processing deadline passes, with a memory
limit (``RLIMIT_AS``) and a CPU-time limit (``RLIMIT_CPU``) set in the worker for each target.

The workers are a :class:`WorkerPool`, shared between callers (the runner's
:func:`~trio_batch.runner.current_caller`) by a :class:`~._shares.FairShares`: ``workers`` at
once as a rule and at most ``per_caller`` of them for one caller, so one caller's costly
patterns queue behind each other and never take every worker. Past ``workers``, up to a hard
``ceiling``, a worker is started only for a caller that holds none: however many callers are
busy, one with nothing running gets a worker at once, and the operating system shares the
cores between the processes that burn. A freed worker goes to the waiting caller that holds
the fewest (round robin between callers, first come first served within one). While the
pool is full, one spare worker is started ahead: starting one (seconds when the busy workers
burn every core) is the newcomer's only wait.

A body that needs no processing is only decoded: in-line when small (no process hop on the
common path), in a thread when large (linear work, bounded by the fetcher's ``max_bytes``).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import resource
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio
import trio_parallel

from ..runner import current_caller
from ._body import Body, process_body
from ._errors import ContentError
from ._options import Plan
from ._shares import FairShares

__all__ = [
    "LARGE_BODY",
    "WORKER_START",
    "WorkerPool",
    "WorkerStatistics",
    "default_workers",
    "needs_worker",
    "process_bounded",
]

_log = logging.getLogger(__name__)

#: Bodies larger than this (bytes) are decoded off the event loop even without processing.
LARGE_BODY = 256 * 1024


def needs_worker(plan: Plan, body: Body) -> bool:
    """Whether processing ``body`` as ``plan`` says is work that must be bounded (not decode)."""
    return bool(
        plan.grep is not None
        or plan.jq
        or plan.html
        or body.content_type == "application/pdf"
        or body.data.startswith(b"%PDF-")
    )


def default_workers() -> int:
    """The default size of a :class:`WorkerPool`: two more than the cores, at least four."""
    return max(2, os.cpu_count() or 1) + 2


@dataclass(frozen=True)
class WorkerStatistics:
    """A :class:`WorkerPool` in one trio run: workers held now (``total``; ``held`` and
    ``waiting`` per caller, callers with neither left out), workers known to be idle, targets
    that waited for a worker to start (``cold_starts``) and spare workers started ahead."""

    total: int
    held: dict[Hashable, int]
    waiting: dict[Hashable, int]
    idle: int
    cold_starts: int
    spares: int


class WorkerPool:
    """Worker processes for body processing, shared fairly between callers.

    - ``workers``: processes busy at once as a rule (default :func:`default_workers`);
    - ``per_caller``: most one caller holds at once (default half of ``workers``);
    - ``ceiling``: most processes busy at once, ever (default twice ``workers``). Between
      ``workers`` and ``ceiling`` a worker goes only to a caller that holds none; while at
      least ``workers`` are busy (and fewer than ``ceiling``), one spare is started ahead
      for it, so ``ceiling`` plus one processes at most.

    A waiting caller holds no worker; a freed one goes to the waiting caller holding the
    fewest (see :class:`~._shares.FairShares`). Targets fetched outside a runner (no caller)
    count as one caller. One pool may serve any number of trio runs, one after another or at
    once: each run gets limits of its own.
    """

    def __init__(
        self, workers: int | None = None, per_caller: int | None = None, ceiling: int | None = None
    ) -> None:
        self.workers = default_workers() if workers is None else workers
        self.per_caller = max(1, self.workers // 2) if per_caller is None else per_caller
        self.ceiling = 2 * self.workers if ceiling is None else ceiling
        if self.workers < 1 or not 1 <= self.per_caller <= self.workers <= self.ceiling:
            raise ValueError(
                "workers must be at least 1, per_caller between 1 and workers, "
                "ceiling at least workers"
            )
        self._runs: trio.lowlevel.RunVar[_PoolState] = trio.lowlevel.RunVar(
            f"trio_batch worker pool {id(self)}"
        )

    def __repr__(self) -> str:
        return (
            f"WorkerPool(workers={self.workers!r}, per_caller={self.per_caller!r}, "
            f"ceiling={self.ceiling!r})"
        )

    def _state(self) -> _PoolState:
        try:
            return self._runs.get()
        except LookupError:
            state = _PoolState(FairShares(self.workers, self.per_caller, self.ceiling))
            self._runs.set(state)
            return state

    def statistics(self) -> WorkerStatistics:
        """What the pool holds and has done in the current trio run."""
        state = self._state()
        shares = state.shares.statistics()
        return WorkerStatistics(
            total=shares.total,
            held=shares.held,
            waiting=shares.waiting,
            idle=state.idle,
            cold_starts=state.cold_starts,
            spares=state.spares,
        )

    @asynccontextmanager
    async def worker(self, plan: Plan) -> AsyncIterator[_Slot]:
        """A worker for the current caller's target, already started: waits for the pool's
        fair share (:class:`~._shares.FairShares`), then for a worker process to start.

        Starting a worker process (and loading its libraries) takes a second or more on a
        loaded machine; it happens here, bounded by :data:`WORKER_START`, so the target's
        processing deadline counts its processing only. On cancellation, while waiting or
        after, the caller's slot is given back (to the next waiter) and a worker being
        started is killed.
        """
        state = self._state()
        async with state.shares.hold(current_caller()):
            limiter = state.limiter
            await self._start_if_none_idle(state, limiter, plan)
            _keep_a_spare(state, plan)
            slot = _Slot(limiter)
            try:
                yield slot
            finally:
                if slot.survived:
                    state.idle += 1

    async def _start_if_none_idle(
        self, state: _PoolState, limiter: trio.CapacityLimiter, plan: Plan
    ) -> None:
        now = trio.current_time()
        if now - state.last_used > _IDLE_TRUSTED:
            state.idle = 0  # trio-parallel may have retired them
        state.last_used = now
        if not state.idle and state.spare is not None:
            await state.spare.wait()  # started before this target asked: sooner than a new one
        if state.idle:
            state.idle -= 1  # that worker is this target's
            return
        state.cold_starts += 1
        with trio.move_on_after(WORKER_START):
            try:
                await trio_parallel.run_sync(
                    _load_processing_libraries, plan, kill_on_cancel=True, limiter=limiter
                )
                return
            except trio_parallel.BrokenWorkerError:
                pass
        raise ContentError(
            f"no worker process could be started within {WORKER_START:g} s to process the body",
            hint="the machine is overloaded or short of memory; try again later",
            retryable=True,
        )


def _keep_a_spare(state: _PoolState, plan: Plan) -> None:
    """Start a spare worker in the background if the pool is full (``workers`` busy or more)
    with none idle and room under the ceiling: the next caller holding none takes it.

    One at a time. A system task: it outlives the target that started it, and is cancelled
    (its worker killed) when the trio run ends. It starts in trio-parallel's default context,
    where targets' workers run; a system task does not see a ``trio_parallel.cache_scope``,
    so under one the spare is idle elsewhere and the target counting on it starts a worker
    inside its processing deadline (as when another user of trio-parallel took an idle one).
    """
    shares = state.shares
    if state.idle or state.spare is not None or not shares.soft <= shares.total < shares.ceiling:
        return
    state.spare = trio.Event()
    state.spares += 1
    try:
        trio.lowlevel.spawn_system_task(_start_spare, state, plan, name="trio_batch spare worker")
    except RuntimeError:  # the run is ending: no spare is needed
        state.spare = None


async def _start_spare(state: _PoolState, plan: Plan) -> None:
    """Start one worker and count it idle (within :data:`WORKER_START`); then, or if it
    fails (that only loses the head start), wake the targets waiting for it."""
    assert state.spare is not None
    done = state.spare
    try:
        with trio.move_on_after(WORKER_START):
            await trio_parallel.run_sync(
                _load_processing_libraries, plan, kill_on_cancel=True, limiter=state.limiter
            )
            state.idle += 1
            state.last_used = trio.current_time()
    except Exception as exc:  # a system task must not raise: the next target starts its own
        _log.debug("a spare processing worker did not start: %r", exc)
    finally:
        state.spare = None
        done.set()


#: Seconds a new worker process may take to start and load its libraries.
WORKER_START = 60.0
#: Seconds after which idle workers may have been retired (trio-parallel keeps them 600 s).
_IDLE_TRUSTED = 300.0


class _Slot:
    """One target's turn at a worker: runs the processing, and knows if the worker lived."""

    __slots__ = ("limiter", "survived")

    def __init__(self, limiter: trio.CapacityLimiter) -> None:
        self.limiter = limiter
        self.survived = False  # True: the worker went back to trio-parallel's cache

    async def run(
        self, plan: Plan, body: Body, context_lines: int, max_output: int, cpu: int, memory: int
    ) -> tuple[str, dict[str, Any]]:
        """Process ``body`` in the worker; it is killed on cancellation."""
        try:
            processed: tuple[str, dict[str, Any]] = await trio_parallel.run_sync(
                _process_limited,
                plan,
                body,
                context_lines,
                max_output,
                cpu,
                memory,
                kill_on_cancel=True,
                limiter=self.limiter,
            )
        except Exception as exc:
            self.survived = not isinstance(exc, trio_parallel.BrokenWorkerError)
            raise
        self.survived = True
        return processed


class _PoolState:
    """A pool's shares in one trio run, and how many of its workers are known to be idle."""

    __slots__ = ("cold_starts", "idle", "last_used", "limiter", "shares", "spare", "spares")

    def __init__(self, shares: FairShares) -> None:
        self.shares = shares
        # trio-parallel's own limit on its calls: never the bound (the shares and the one
        # spare are), so never waited on; its default (the cores) would undo the burst.
        self.limiter = trio.CapacityLimiter(shares.ceiling + 1)
        self.idle = 0
        self.spare: trio.Event | None = None  # set once the spare being started is ready
        self.cold_starts = 0
        self.spares = 0
        self.last_used = float("-inf")


async def process_bounded(
    plan: Plan,
    body: Body,
    context_lines: int,
    *,
    seconds: float,
    memory: int,
    max_output: int,
    pool: WorkerPool,
) -> tuple[str, dict[str, Any]]:
    """:func:`process_body`, in a worker of ``pool`` killed after ``seconds`` or past ``memory``.

    Raises :class:`ContentError` with a hint when the processing runs out of time or memory,
    :class:`OutputTooLarge` past ``max_output``. The time counts from when a started worker
    is free for this caller: waiting for the caller's share or a worker's start does not
    count. On cancellation the worker is killed and Cancelled propagates.
    """
    if not needs_worker(plan, body):
        try:
            if len(body.data) <= LARGE_BODY:
                return process_body(plan, body, context_lines, max_output)
            return await trio.to_thread.run_sync(
                functools.partial(process_body, plan, body, context_lines, max_output),
                abandon_on_cancel=True,  # pure computation: nothing to clean up if we stop waiting
            )
        except MemoryError:
            raise _out_of_memory(body.url, None) from None
    cpu = max(1, math.ceil(seconds))
    async with pool.worker(plan) as slot:
        with trio.move_on_after(seconds) as deadline:
            try:
                return await slot.run(plan, body, context_lines, max_output, cpu, memory)
            except MemoryError:
                raise _out_of_memory(body.url, memory) from None
            except trio_parallel.BrokenWorkerError:
                # The worker died: killed by RLIMIT_CPU (SIGXCPU), by a library aborting when
                # an allocation failed under RLIMIT_AS, or by a crash in a compiled parser.
                raise ContentError(
                    f"processing {body.url} stopped: the worker died, past the limit of {cpu} "
                    f"s of CPU time or {memory // (1024 * 1024)} MiB of memory, or crashed",
                    hint=_HINT,
                ) from None
    assert deadline.cancelled_caught
    raise ContentError(
        f"processing {body.url} took longer than {seconds:g} s and was stopped",
        hint=_HINT,
    )


_HINT = (
    "the grep pattern, jq program or document is too costly for this body; simplify the "
    "pattern (avoid nested repeats like '(.+)+'), narrow the jq program, or fetch a smaller "
    "or less deeply nested resource (HTML nested thousands deep is slow to parse)"
)


def _out_of_memory(url: str, memory: int | None) -> ContentError:
    limit = "" if memory is None else f" (limit {memory // (1024 * 1024)} MiB)"
    return ContentError(f"processing {url} ran out of memory{limit}", hint=_HINT)


def _quiet_worker_logging() -> None:
    """Keep libraries' log records in the worker off the terminal.

    The worker has no logging set up, so Python's last-resort handler would print pypdf's
    warnings about a damaged file, bare, straight into the command's progress lines; what
    matters of them is the target's outcome, which is returned.
    """
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())


def _process_limited(
    plan: Plan, body: Body, context_lines: int, max_output: int, cpu_seconds: int, memory: int
) -> tuple[str, dict[str, Any]]:
    """In the worker: limit this process's CPU time and memory, then process the body.

    Both limits are counted from what the worker already uses, and the processing libraries
    are loaded before they apply: a limit must bound the target's work, not refuse to map a
    library (a jq loaded for the first time under a low address-space limit fails to load, an
    ImportError that says nothing about the target).
    """
    _quiet_worker_logging()
    _load_processing_libraries(plan)
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft_cpu = math.ceil(used.ru_utime + used.ru_stime) + cpu_seconds
    _, hard_cpu = resource.getrlimit(resource.RLIMIT_CPU)
    if hard_cpu == resource.RLIM_INFINITY or soft_cpu <= hard_cpu:
        resource.setrlimit(resource.RLIMIT_CPU, (soft_cpu, hard_cpu))
    soft_as = _address_space() + memory
    _, hard_as = resource.getrlimit(resource.RLIMIT_AS)
    if hard_as == resource.RLIM_INFINITY or soft_as <= hard_as:
        resource.setrlimit(resource.RLIMIT_AS, (soft_as, hard_as))
    return process_body(plan, body, context_lines, max_output)


def _load_processing_libraries(plan: Plan) -> None:
    """Import what processing may load lazily (once per worker; later calls cost nothing).

    trafilatura, the heaviest, only for a target that needs it (``mode: main``).
    """
    import jq  # noqa: F401 - jq programs
    import pypdf  # noqa: F401 - PDF text
    import selectolax.lexbor  # noqa: F401 - HTML to text and Markdown

    if plan.html == "main":
        import trafilatura  # noqa: F401


def _address_space() -> int:
    """Bytes of address space this process maps now (0 where /proc cannot tell)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * resource.getpagesize()
