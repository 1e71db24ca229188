"""Reading a job in parts: the small job view, one target's result at a time, and the
outcomes a watcher has not seen yet.

A job's results can be large (16 targets of 9 MB each); the service's job view reads only
the targets' statuses and result sizes, and serves each result on its own, so memory stays
flat however big the results are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..._model import (
    Job,
    TargetStatus,
    is_caller,
    is_job_id,
    is_target_index,
    with_running,
)
from .._pages import rows_within, targets_page
from .._rows import job_from_row
from .._rows import target_from_row as _target
from . import _queries as q
from ._store import Store

__all__ = ["job_overview", "latest_retry", "one_target", "outcomes_from", "targets_after"]

T = TypeVar("T")


def job_overview(
    store: Store, job_id: str, *, now: float
) -> tuple[Job, list[TargetStatus], list[int]] | None:
    """The job, its targets without results (``result`` None), and each result's size in
    characters (0 without one), from one snapshot; None if unknown, malformed or lapsed."""
    found = _with_job(
        store,
        job_id,
        now,
        lambda: store.db.execute(q.GET_TARGETS_WITHOUT_RESULTS, (job_id,)).fetchall(),
    )
    if found is None:
        return None
    job, rows = found
    targets = [_target(row[:-1]) for row in rows]
    return job, with_running(job, targets), [int(row[-1]) for row in rows]


def one_target(
    store: Store, job_id: str, idx: int, *, now: float
) -> tuple[Job, TargetStatus] | None:
    """The job and one of its targets with its result; None if either is unknown."""
    if not is_target_index(idx):
        return None
    found = _with_job(
        store, job_id, now, lambda: store.db.execute(q.GET_ONE_TARGET, (job_id, idx)).fetchone()
    )
    if found is None or found[1] is None:
        return None
    job, row = found
    return job, with_running(job, [_target(row)])[0]


def outcomes_from(
    store: Store,
    job_id: str,
    start: int,
    *,
    now: float,
    limit: int,
    max_bytes: int | None = None,
    results_up_to: int | None = None,
) -> tuple[Job, list[TargetStatus]] | None:
    """The job and up to ``limit`` of its targets from ``start`` on that have an outcome;
    ``max_bytes`` and ``results_up_to`` as :meth:`JobStore.get_outcomes`."""
    sql, values = targets_page(
        job_id, start - 1, limit=limit, outcomes=True, results_up_to=results_up_to
    )
    found = _with_job(store, job_id, now, lambda: _read_within(store, sql, values, max_bytes))
    if found is None:
        return None
    job, rows = found
    return job, [_target(row) for row in rows]


def targets_after(
    store: Store,
    job_id: str,
    after: int,
    *,
    now: float,
    limit: int,
    max_bytes: int | None = None,
    results: bool = True,
) -> tuple[Job, list[TargetStatus]] | None:
    """The job and up to ``limit`` of its targets after index ``after``, in order, with their
    results (the one due next reads ``running``); ``max_bytes`` and ``results`` as
    :meth:`JobStore.get_targets_after`."""
    sql, values = targets_page(job_id, after, limit=limit, results=results)
    bound = max_bytes if results else None  # without results nothing is loaded
    found = _with_job(store, job_id, now, lambda: _read_within(store, sql, values, bound))
    if found is None:
        return None
    job, rows = found
    return job, with_running(job, [_target(row) for row in rows])


def latest_retry(store: Store, job_id: str, caller: str, *, now: float) -> Job | None:
    """The newest unexpired job of ``caller`` that retries ``job_id``, or None."""
    if not is_job_id(job_id) or not is_caller(caller):
        return None
    with store._locked():
        row = store.db.execute(q.LATEST_RETRY, (job_id, caller, now)).fetchone()
    return None if row is None else job_from_row(row)


def retries(store: Store, job_id: str, caller: str, *, now: float, limit: int) -> list[Job]:
    """At most ``limit`` unexpired jobs of ``caller`` that retry ``job_id``, newest first."""
    if not is_job_id(job_id) or not is_caller(caller):
        return []
    with store._locked():
        rows = store.db.execute(q.RETRIES, (job_id, caller, now, limit)).fetchall()
    return [job_from_row(row) for row in rows]


def _read_within(
    store: Store, sql: str, values: tuple[str | int, ...], max_bytes: int | None
) -> list[Sequence[Any]]:
    """The rows of ``sql``, read one at a time until their results pass ``max_bytes``."""
    cursor = store.db.conn.execute(sql, values)
    try:
        return rows_within(cursor, max_bytes)
    finally:
        cursor.close()  # the rows past the bound are never read


def _with_job(store: Store, job_id: str, now: float, read: Callable[[], T]) -> tuple[Job, T] | None:
    """The unexpired job and what ``read`` reads, from one snapshot; None without the job."""
    if not is_job_id(job_id):
        return None
    with store._snapshot():
        job = store.get_job(job_id, now=now)
        if job is None:
            return None
        return job, read()  # rows fetched inside the snapshot, so they match the job
