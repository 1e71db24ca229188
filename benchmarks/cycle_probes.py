"""Probes of the SQLite submit -> drain -> wait cycle (see :mod:`benchmarks.probes`).

- ``cycle``: :func:`benchmarks.workloads.measure_cycle` beside :func:`benchmarks.minimal.measure`
  (the bare loop), 1 and 8 callers, in interleaved rounds, as ``make bench`` pairs them.
- ``layers``: the cost of one outcome write as each layer of the store's path is added, each
  layer called directly in a loop (no scheduler, WAL checkpoints off): a lone writer's
  (a serial drain) and 8 writes sharing a commit, beside the bare loop's own statements.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import trio

from trio_batch import Job, JobState, OutcomeWrite, Result, Store, Target
from trio_batch.store import NewJob, Stored
from trio_batch.store.sqlite import SQLiteJobStore, _paths
from trio_batch.store.sqlite import _queries as q

from . import minimal, workloads

_TTL = 86400.0
#: The bare loop's statements (benchmarks/minimal.py), for the same write.
_BARE_BUMP = minimal._BUMP
_BARE_STORE = minimal._STORE
_RESULT_JSON = '{"content":"","meta":{}}'


def _in_scratch(measure: Callable[[str], float]) -> float:
    directory = tempfile.mkdtemp(prefix="trio-batch-cycle-")
    try:
        return measure(os.path.join(directory, "cycle.db"))
    finally:
        shutil.rmtree(directory)


def probe_cycle(*, rounds: int = 5, serial_jobs: int = 100, jobs_per_caller: int = 25) -> None:
    """Interleaved rounds of the cycle and the bare loop; the cycle's ratio, medians."""
    ratios: dict[int, list[float]] = {1: [], 8: []}
    for r in range(rounds):
        cells = [f"round {r + 1}:"]
        for callers, jobs in ((1, serial_jobs), (8, jobs_per_caller)):
            bare = _in_scratch(functools.partial(minimal.measure, callers=callers, jobs=jobs))
            cycle = _in_scratch(
                functools.partial(
                    workloads.measure_cycle, callers=callers, jobs_per_caller=jobs, tag=f"p{r}"
                )
            )
            ratios[callers].append(cycle / bare)
            cells.append(f"{callers} caller(s) {cycle:,.0f} / {bare:,.0f} = {cycle / bare:.3f}x;")
        print(" ".join(cells), flush=True)
    print(
        f"medians of {rounds} rounds: 1 caller {statistics.median(ratios[1]):.3f}x, "
        f"8 callers {statistics.median(ratios[8]):.3f}x the bare loop",
        flush=True,
    )


def _now_or_never(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` to its end without a scheduler; it must not yield."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the layer yielded: it cannot be timed on its own")


def _new_job(store: SQLiteJobStore, n: int, tag: str) -> Coroutine[Any, Any, tuple[Job, bool]]:
    targets = tuple(Target(f"https://layers.test/{tag}/{i}") for i in range(n))
    new = NewJob(
        f"caller-{tag}",
        "bench",
        targets,
        ttl=_TTL,
        targets_per_job=n,
        jobs_per_caller=10**6,
        jobs_total=10**6,
        status=JobState.RUNNING,
    )
    return store.create_job(new, now=time.time())


#: One layer: writes (one per job) at ``now`` -> the jobs as they now are.
_Layer = Callable[[list[OutcomeWrite], float], list[Job]]


def _raw(store: SQLiteJobStore, bare: bool) -> _Layer:
    """The statements alone, in one transaction; the bare loop's with a savepoint per write
    beside others (the store's need none: a write that misses has written nothing)."""

    def layer(writes: list[OutcomeWrite], now: float) -> list[Job]:
        assert store._fast is not None
        conn = store._fast.db.conn
        shared = bare and len(writes) > 1
        conn.execute("BEGIN IMMEDIATE")
        for w in writes:
            seen = w.seen
            assert seen is not None
            if shared:
                conn.execute("SAVEPOINT w")
            if bare:
                conn.execute(_BARE_BUMP, (now, now + _TTL, w.job_id, now))
                conn.execute(_BARE_STORE, (_RESULT_JSON, now, w.job_id, w.idx))
            else:
                store_args = ("done", _RESULT_JSON, None, None, now, 1, w.job_id, w.idx)
                match = (seen.id, now, seen.status, seen.error, seen.targets_done)
                # The job as seen: what can change, and what tells it from one given again.
                unchanged = (seen.targets_failed, seen.created_at, seen.targets_total)
                kind = (seen.caller, seen.caller_class, seen.idem_key)
                conn.execute(q.STORE_OUTCOME_AS_SEEN, (*store_args, *match, *unchanged, *kind))
                bump = (0, len(_RESULT_JSON), now, now + _TTL, seen.id)
                conn.execute(q.BUMP_SEEN_JOB, bump)
            if shared:
                conn.execute("RELEASE w")
        conn.execute("COMMIT")
        return [
            dataclasses.replace(w.seen, targets_done=w.seen.targets_done + 1)
            for w in writes
            if w.seen is not None
        ]

    return layer


def _layers(store: SQLiteJobStore, batch: int) -> dict[str, _Layer]:
    fast = store._fast
    assert fast is not None

    def answers(found: Sequence[Job | Stored | Exception | None]) -> list[Job]:
        assert all(isinstance(job, Job) for job in found)
        return [job for job in found if isinstance(job, Job)]

    layers: dict[str, _Layer] = {
        "the bare loop's statements": _raw(store, bare=True),
        "the store's statements": _raw(store, bare=False),
        "Store.record_outcomes": lambda ws, now: answers(
            fast.record_outcomes(ws, ttl=_TTL, now=now)
        ),
        "+ _store_outcomes (the fast path)": lambda ws, now: answers(
            _now_or_never(store._store_outcomes(ws, ttl=_TTL, now=now))
        ),
        "+ StoreFace._commit": lambda ws, now: answers(
            _now_or_never(store._commit([(w, _TTL, now, math.inf) for w in ws]))
        ),
    }
    if batch == 1:

        def whole(ws: list[OutcomeWrite], now: float) -> list[Job]:
            store._group._sole_writer = ws[0].job_id  # a serial drain's, after its first
            job = _now_or_never(store.record_outcome(ws[0], ttl=_TTL, now=now))
            return answers([job])

        def grouped(ws: list[OutcomeWrite], now: float) -> list[Job]:
            store._group._sole_writer = ws[0].job_id
            return answers(
                [
                    _now_or_never(
                        store._group.write((ws[0], _TTL, now, math.inf), writer=ws[0].job_id)
                    )
                ]
            )

        def now(ws: list[OutcomeWrite], now: float) -> list[Job]:
            store._group._sole_writer = ws[0].job_id
            job = store.record_outcome_now(ws[0], ttl=_TTL, now=now)
            assert isinstance(job, Job)  # taken on the spot, not declined
            return [job]

        layers["+ GroupCommit.write"] = grouped
        layers["record_outcome (the async call)"] = whole
        layers["record_outcome_now (what the drain calls)"] = now
    return layers


def probe_layers(*, rounds: int = 9, per_job: int = 32) -> None:
    """µs per outcome of each layer, for a lone writer and for 8 writes in one commit."""
    saved = _paths.CHECKPOINT_EVERY
    _paths.CHECKPOINT_EVERY = 10**9  # the checkpoints' cost is another probe's

    async def main(path: str) -> None:
        store = SQLiteJobStore(Store.open(path), owns_store=True)
        store._budget.seconds = 1e9  # no pass ends: every layer is timed on the loop
        try:
            await store.get_job("0" * 22, now=time.time())  # starts the fast path
            made = 0  # jobs so far: each has targets of its own (none is reused)
            for batch in (1, 8):
                times: dict[str, list[float]] = {}
                for r in range(rounds):
                    layers = list(_layers(store, batch).items())
                    # Each round in another order: a later job meets a bigger database.
                    for name, layer in layers[r % len(layers) :] + layers[: r % len(layers)]:
                        jobs = []
                        for _ in range(batch):
                            made += 1
                            jobs.append((await _new_job(store, per_job, str(made)))[0])
                        store._group._sole_writer = None
                        started = time.perf_counter()
                        for idx in range(per_job):
                            writes = [
                                OutcomeWrite(job.id, idx, result=Result(""), seen=job)
                                for job in jobs
                            ]
                            jobs = layer(writes, time.time())
                        took = time.perf_counter() - started
                        times.setdefault(name, []).append(took / (per_job * batch) * 1e6)
                        await trio.lowlevel.checkpoint()
                print(f"{batch} write(s) per commit, µs per outcome (medians of {rounds} jobs):")
                for name, _ in layers:
                    samples = times[name]
                    print(f"  {name:40s} {statistics.median(samples):6.1f}", flush=True)
        finally:
            await store.aclose()

    try:
        _in_scratch(lambda path: trio.run(main, path) or 0.0)
    finally:
        _paths.CHECKPOINT_EVERY = saved
