"""What the runner does to many targets or jobs at once: retry a job's failed or unfinished
targets as a new job, export a job in pages (merged with its retries), cancel a caller's jobs
by filter.

Each works page by page through the store (:meth:`JobStore.get_targets_after`,
:meth:`JobStore.list_caller_jobs`), so its memory is one page's whatever the job's or the
caller's size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Collection
from typing import Any

import trio

from .._errors import InvalidRequest, InvalidTargets, JobGone, JobLive, TooManyTargets
from .._model import Job, JobState, Target, TargetState, TargetStatus
from ..store import JobFilter, JobStore

__all__ = [
    "EXPORT_PAGE",
    "EXPORT_PAGE_BYTES",
    "RETRY_KINDS",
    "check_only",
    "export_line",
    "export_targets",
    "matching_live_jobs",
    "retry_targets",
]

#: Most targets read at once by an export or a retry.
EXPORT_PAGE = 64
#: Most characters of results one export page holds (past it the page ends early): with
#: 10 MB results a page of 64 held 640 MB.
EXPORT_PAGE_BYTES = 4 * 1024 * 1024
#: What ``Runner.retry(only=...)`` may name: failed targets, and targets without an outcome.
RETRY_KINDS = ("failed", "pending")
#: Most retries a merged export overlays, however deep (retries of retries count too): each
#: is read beside the job, a page at a time, so this bounds the export's memory.
MAX_MERGED_RETRIES = 16
#: Most live jobs one bulk cancel reads (far above any caller's cap of live jobs).
MAX_BULK = 10_000
_LIVE = frozenset({JobState.QUEUED, JobState.RUNNING})


def check_only(only: object) -> frozenset[str]:
    """``only`` as a set of :data:`RETRY_KINDS`; raises InvalidRequest for anything else."""
    if isinstance(only, str) or not isinstance(only, Collection) or not only:
        raise InvalidRequest(f"only must be a non-empty list of {', '.join(RETRY_KINDS)}")
    # Each checked before the set is made: a list or an object in it (unhashable) raised a
    # TypeError, a 500 from the service.
    if not all(isinstance(k, str) and k in RETRY_KINDS for k in only):
        raise InvalidRequest(f"only may name {' and '.join(RETRY_KINDS)}, nothing else")
    return frozenset(only)


def _as_target(t: TargetStatus) -> Target:
    return Target(t.url, t.options, t.custom_id)


async def retry_targets(
    store: JobStore, job: Job, kinds: frozenset[str], *, now: float, limit: int
) -> list[Target]:
    """The targets of the terminal ``job`` that ``kinds`` picks, in order: ``failed`` ones,
    and ``pending`` ones (no outcome: the job was cancelled or killed by a restart).

    Raises :class:`JobLive` for a live job, :class:`TooManyTargets` past ``limit`` (before
    reading further), :class:`InvalidTargets` if none is picked.
    """
    if job.status.is_live:
        raise JobLive(f"job {job.id} is {job.status}; retry it once it has ended")
    picked: list[Target] = []
    after = -1
    while True:
        await trio.lowlevel.checkpoint_if_cancelled()  # see _pages
        # The selection needs statuses only: no result is loaded.
        page = await store.get_targets_after(
            job.id, after, now=now, limit=EXPORT_PAGE, results=False
        )
        if page is None:
            raise _gone(job.id)
        for t in page[1]:
            if (t.status is TargetState.FAILED and "failed" in kinds) or (
                not t.is_finished and "pending" in kinds
            ):
                picked.append(_as_target(t))
        if len(picked) > limit:
            raise TooManyTargets(
                f"job {job.id} has more than {limit} such targets; the limit is {limit} per job"
            )
        if len(page[1]) < EXPORT_PAGE:
            break
        after = page[1][-1].idx
    if not picked:
        raise InvalidTargets(f"job {job.id} has no {' or '.join(sorted(kinds))} target to retry")
    return picked


def _gone(job_id: str) -> JobGone:
    return JobGone(f"job {job_id} was deleted while it was being read; what was read is not all")


async def _pages(
    store: JobStore, job_id: str, after: int, now: float
) -> AsyncIterator[TargetStatus]:
    while True:
        # A store read runs to completion and never raises Cancelled (nor takes a Ctrl-C):
        # without this, a reader that awaits nothing else read the whole job regardless.
        await trio.lowlevel.checkpoint_if_cancelled()
        page = await store.get_targets_after(
            job_id, after, now=now, limit=EXPORT_PAGE, max_bytes=EXPORT_PAGE_BYTES
        )
        if page is None:
            raise _gone(job_id)
        if not page[1]:
            return  # a page cut short by size is not the last: only an empty one is
        for t in page[1]:
            yield t
        after = page[1][-1].idx


async def export_targets(
    store: JobStore, job: Job, *, now: float, after: int = -1, merged: bool = False
) -> AsyncIterator[tuple[str, TargetStatus]]:
    """``(job id, target)`` for each of ``job``'s targets with an index above ``after``, in
    order. ``merged``: a target that one of the job's retries (by the same caller, and their
    retries in turn, :data:`MAX_MERGED_RETRIES` of them at most, the newest first) has an
    outcome for shows the newest such outcome, under the job id of the retry that stored it,
    at this job's index. Raises :class:`JobGone` if a job is deleted while it is read."""
    budget = [MAX_MERGED_RETRIES if merged else 0]
    async for pair in _merged(store, job, after, now, budget):
        yield pair


async def _merged(
    store: JobStore, job: Job, after: int, now: float, budget: list[int]
) -> AsyncIterator[tuple[str, TargetStatus]]:
    children: list[Job] = []
    if budget[0] > 0:
        children = await store.retries(job.id, caller=job.caller, now=now, limit=budget[0])
        budget[0] -= len(children)
    if not children:
        async for t in _pages(store, job.id, after, now):
            yield job.id, t
        return
    # A retry's targets are some of its parent's, in the parent's order: walk them all at
    # once. Each is read from its start so that it lines up, even when resuming after `after`.
    overlays = [_merged(store, child, -1, now, budget) for child in children]  # newest first
    heads = [await anext(overlay, None) for overlay in overlays]
    async for t in _pages(store, job.id, -1, now):
        shown: tuple[str, TargetStatus] = (job.id, t)
        taken = False
        for i, head in enumerate(heads):
            if head is None or _as_target(head[1]) != _as_target(t):
                continue
            if not taken and head[1].is_finished:  # the newest retry with an outcome wins
                shown, taken = (head[0], dataclasses.replace(head[1], idx=t.idx)), True
            heads[i] = await anext(overlays[i], None)
        if t.idx > after:
            yield shown


async def matching_live_jobs(
    store: JobStore, caller: str, where: JobFilter, *, now: float
) -> list[Job]:
    """``caller``'s live jobs that ``where`` lists (its statuses narrowed to the live ones),
    newest first, at most :data:`MAX_BULK`."""
    statuses = _LIVE if not where.statuses else where.statuses & _LIVE
    if not statuses:
        return []
    live = dataclasses.replace(where, statuses=statuses)
    found: list[Job] = []
    before = None
    while len(found) < MAX_BULK:
        await trio.lowlevel.checkpoint_if_cancelled()  # see _pages
        page = await store.list_caller_jobs(caller, now=now, limit=100, before=before, where=live)
        found += page
        if len(page) < 100:
            break
        before = (page[-1].created_at, page[-1].id)
    return found[:MAX_BULK]


def export_line(job_id: str, target: TargetStatus, *, merged: bool) -> dict[str, Any]:
    """One target as a line of the JSONL export: ``idx``, ``custom_id``, ``url``, ``status``,
    then ``result`` (a success) or ``error`` and ``hint`` (a failure); nothing more for a
    target without an outcome. ``merged``: ``job_id``, the job whose outcome it is."""
    line: dict[str, Any] = {
        "idx": target.idx,
        "custom_id": target.custom_id,
        "url": target.url,
        "status": str(target.status),
    }
    if merged:
        line["job_id"] = job_id
    result = target.result
    if result is not None and target.error is None:
        line["result"] = {"content": result.content, "meta": result.meta}
    elif target.error is not None:
        line["error"], line["hint"] = target.error, target.hint
    return line
