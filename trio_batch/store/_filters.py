"""A caller's filtered job lists: the filter, and the SQL both backends run for it.

A page is read newest first (``created_at``, then id) straight off an index: one status at a
time from ``jobs_caller_status_created`` (several statuses are several such reads, merged), or
from ``job_labels_filter`` when a label is asked for. The SQL is built here from fixed
fragments only; every value is a bound parameter.
"""

from __future__ import annotations

import datetime
import heapq
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import InvalidRequest
from .._model import Job, JobState, check_metadata
from .._text import safe_text

__all__ = [
    "EVERY_JOB",
    "LATEST_TIME",
    "JobFilter",
    "filtered_queries",
    "merge_pages",
    "parse_filter",
]

#: Most labels one filter may ask for (each is one more index lookup per job).
MAX_FILTER_LABELS = 4
#: The latest ``created_after`` a filter takes: 9999-12-31T23:59:59Z, in epoch seconds.
LATEST_TIME = 253_402_300_799
_NUMBER = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?", re.ASCII)
_STATES = {state.value: state for state in JobState}


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which of a caller's jobs a list shows (every condition must hold).

    ``statuses``: any of these (none: any status); ``labels``: ``(key, value)`` pairs the
    job's metadata must all hold; ``created_after``: created strictly after this time.
    Constructing one checks it: a bad label raises :class:`~trio_batch.InvalidRequest`.
    """

    statuses: frozenset[JobState] = frozenset()
    labels: tuple[tuple[str, str], ...] = ()
    created_after: float | None = None

    def __post_init__(self) -> None:
        if len(self.labels) > MAX_FILTER_LABELS:
            raise InvalidRequest(f"at most {MAX_FILTER_LABELS} labels may be filtered on")
        check_metadata(dict(self.labels))
        if len({key for key, _ in self.labels}) != len(self.labels):
            raise InvalidRequest("each label key may be filtered on once")
        when = self.created_after
        if when is not None:
            # As parse_filter's: 10**400 raised OverflowError binding it in SQLite, and NaN
            # listed nothing without a word.
            if isinstance(when, bool) or not isinstance(when, int | float):
                raise InvalidRequest(
                    f"created_after must be epoch seconds, not {type(when).__name__}"
                )
            if not 0 <= when <= LATEST_TIME:  # NaN fails both
                raise InvalidRequest(
                    "created_after must be epoch seconds up to the year 9999, "
                    f"not {safe_text(when, 40)}"
                )
            object.__setattr__(self, "created_after", float(when))

    def matches(self, job: Job) -> bool:
        """True if ``job`` (the caller's) is one this filter lists."""
        return (
            (not self.statuses or job.status in self.statuses)
            and all(job.metadata.get(key) == value for key, value in self.labels)
            and (self.created_after is None or job.created_at > self.created_after)
        )


#: The filter of a plain list: every job.
EVERY_JOB = JobFilter()


def parse_filter(
    statuses: Sequence[object], labels: Sequence[object], created_after: object | None
) -> JobFilter:
    """The :class:`JobFilter` a person asked for, in a query, a JSON body or command-line
    flags: ``statuses`` by name, ``labels`` as ``key:value``, ``created_after`` as epoch
    seconds (a number or its digits) or an ISO 8601 time (UTC without an offset).

    Raises :class:`~trio_batch.InvalidRequest` naming the first value it cannot take.
    """
    return JobFilter(
        statuses=frozenset(_status(s) for s in statuses),
        labels=tuple(_label(label) for label in labels),
        created_after=None if created_after is None else _created_after(created_after),
    )


def _status(value: object) -> JobState:
    if not isinstance(value, str) or value not in _STATES:
        raise InvalidRequest(f"status {safe_text(value, 40)!r} is not one of {', '.join(_STATES)}")
    return _STATES[value]


def _label(value: object) -> tuple[str, str]:
    if not isinstance(value, str) or ":" not in value:
        raise InvalidRequest(f"a label filter is key:value, not {safe_text(value, 80)!r}")
    key, _, wanted = value.partition(":")
    return key, wanted


def _created_after(value: object) -> float:
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        value = float(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if 0 <= value <= LATEST_TIME:  # NaN fails both
            return float(value)
    elif isinstance(value, str):
        try:
            when = datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if when.tzinfo is None:
                when = when.replace(tzinfo=datetime.UTC)
            return when.timestamp()
    raise InvalidRequest(
        "created_after must be epoch seconds (up to the year 9999) or an ISO 8601 time, "
        f"not {safe_text(value, 60)!r}"
    )


def filtered_queries(
    columns: Sequence[str],
    caller: str,
    where: JobFilter,
    *,
    now: float,
    limit: int,
    before: tuple[float, str] | None,
    jobs: str = "jobs",
) -> list[tuple[str, list[Any]]]:
    """The ``(sql, params)`` reads of one page (``?`` placeholders), one per status asked
    for; each answers at most ``limit`` jobs newest first, so :func:`merge_pages` of their
    rows is the page. ``columns`` are the job columns in :class:`Job`'s order; ``jobs`` is
    what to read them from (SQL of the backend's: its table, or a subquery in its place)."""
    statuses: Iterable[JobState | None] = sorted(where.statuses) or [None]
    return [_query(columns, caller, where, s, now, limit, before, jobs) for s in statuses]


def _query(
    columns: Sequence[str],
    caller: str,
    where: JobFilter,
    status: JobState | None,
    now: float,
    limit: int,
    before: tuple[float, str] | None,
    jobs: str,
) -> tuple[str, list[Any]]:
    if where.labels:
        (key, value), others = where.labels[0], where.labels[1:]
        # Driven by the first label's index rows (already in page order), then joined.
        sql = [
            f"SELECT {', '.join('j.' + c for c in columns)} FROM job_labels l "
            f"JOIN {jobs} j ON j.id = l.job_id "
            "WHERE l.caller = ? AND l.key = ? AND l.value = ? AND j.expires_at > ?"
        ]
        params: list[Any] = [caller, key, value, now]
        order, when, ident = "l.created_at DESC, l.job_id DESC", "l.created_at", "l.job_id"
        job = "j."
        for key, value in others:
            sql.append(
                "AND EXISTS (SELECT 1 FROM job_labels m WHERE m.job_id = j.id "
                "AND m.key = ? AND m.value = ?)"
            )
            params += [key, value]
    else:
        sql = [
            f"SELECT {', '.join(columns)} FROM {jobs} AS jobs WHERE caller = ? AND expires_at > ?"
        ]
        params = [caller, now]
        order, when, ident, job = "created_at DESC, id DESC", "created_at", "id", ""
    if status is not None:
        sql.append(f"AND {job}status = ?")
        params.append(status.value)
    if where.created_after is not None:
        sql.append(f"AND {when} > ?")
        params.append(where.created_after)
    if before is not None:
        sql.append(f"AND ({when}, {ident}) < (?, ?)")
        params += [before[0], before[1]]
    sql.append(f"ORDER BY {order} LIMIT ?")
    params.append(limit)
    return " ".join(sql), params


def _newest_first(job: Job) -> tuple[float, str]:
    return job.created_at, job.id


def merge_pages(pages: Sequence[list[Job]], limit: int) -> list[Job]:
    """The newest ``limit`` jobs of pages that are each newest first."""
    if len(pages) == 1:
        return pages[0][:limit]
    merged = heapq.merge(*pages, key=_newest_first, reverse=True)
    return list(itertools.islice(merged, limit))
