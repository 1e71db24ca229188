"""Reading a job without its results: the small job view, and one target's result at a time.

A job's results can be large (16 targets of 9 MB each); the service's job view reads only
the targets' statuses and result sizes, and serves each result on its own, so memory stays
flat however big the results are.
"""

from __future__ import annotations

from ..._model import Job, TargetStatus, is_job_id, with_running
from . import _queries as q
from ._store import Store, _target

__all__ = ["job_overview", "one_target"]


def job_overview(
    store: Store, job_id: str, *, now: float
) -> tuple[Job, list[TargetStatus], list[int]] | None:
    """The job, its targets without results (``result`` None), and each result's size in
    characters (0 without one), from one snapshot; None if unknown, malformed or lapsed."""
    if not is_job_id(job_id):
        return None
    with store._snapshot():
        job = store.get_job(job_id, now=now)
        if job is None:
            return None
        rows = store.db.execute(q.GET_TARGETS_WITHOUT_RESULTS, (job_id,)).fetchall()
    targets = [_target(row[:-1]) for row in rows]
    return job, with_running(job, targets), [int(row[-1]) for row in rows]


def one_target(
    store: Store, job_id: str, idx: int, *, now: float
) -> tuple[Job, TargetStatus] | None:
    """The job and one of its targets with its result; None if either is unknown."""
    if not is_job_id(job_id):
        return None
    with store._snapshot():
        job = store.get_job(job_id, now=now)
        if job is None:
            return None
        row = store.db.execute(q.GET_ONE_TARGET, (job_id, idx)).fetchone()
    return None if row is None else (job, with_running(job, [_target(row)])[0])
