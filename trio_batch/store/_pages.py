"""A page of a job's targets, bounded by a count and by its results' size: the SQL both
backends run for it, in their placeholders, and the cut SQLite makes as it reads.

What an export, a retry's selection and a watcher read. A result can be megabytes, so a page
of a fixed count of rows is not bounded in memory: a bounded page ends with the row whose
result takes the page's results past ``max_bytes`` (the first row always comes, however big),
and no row past it is read.

Each backend bounds it the way that reads each result once:

- SQLite reads the page row by row and stops past the bound (:func:`rows_within`): its
  ``length()`` of a text reads the whole value, and a window summing sizes materialized every
  row's result first, so each page of one 10 MB result read the next 256 of them.
- PostgreSQL sums ``octet_length(result)`` in the query (:func:`sized_targets_page`): the size
  of a TOASTed value is known without reading it, and psycopg takes every row a query answers
  at once, so the bound must be the server's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["rows_within", "sized_targets_page", "targets_page"]

#: The targets' columns, in :func:`~._rows.target_from_row`'s order, the result left to fill.
_COLUMNS = "idx, url, status, {result}, error, hint, options, finished_at, attempts, custom_id"
#: Where the result is in a row of those columns.
_RESULT = 3


def targets_page(
    job_id: str,
    after: int,
    *,
    limit: int,
    results: bool = True,
    outcomes: bool = False,
    placeholder: str = "?",
    results_up_to: int | None = None,
) -> tuple[str, tuple[str | int, ...]]:
    """The SQL and its parameters for up to ``limit`` of a job's targets with an index above
    ``after``, in ``idx`` order, unbounded by size (SQLite cuts it with :func:`rows_within`).

    ``outcomes``: only targets with an outcome (``done`` or ``failed``, what a watcher reads);
    else every target (an export's read). Without ``results`` each result reads as NULL and
    none is loaded. ``results_up_to``: a result longer than that reads as NULL, and the row
    ends with its length (see :func:`~._rows.target_from_row`). ``placeholder``: ``"?"`` for
    SQLite, ``"%s"`` for PostgreSQL."""
    sql = _query(results, False, outcomes, results_up_to is not None, placeholder)
    return sql, _values(results_up_to, job_id, after, limit)


def sized_targets_page(
    job_id: str,
    after: int,
    *,
    limit: int,
    max_bytes: int,
    outcomes: bool = False,
    results_up_to: int | None = None,
) -> tuple[str, tuple[str | int, ...]]:
    """PostgreSQL's :func:`targets_page` with its results, bounded in the query: the page ends
    with the row whose result takes the page's results past ``max_bytes`` bytes (their
    ``octet_length``, read from each TOASTed value's header, not from the value)."""
    sql = _query(True, True, outcomes, results_up_to is not None, "%s")
    return sql, _values(results_up_to, job_id, after, limit, max_bytes)


def _values(results_up_to: int | None, *values: str | int) -> tuple[str | int, ...]:
    # The cut's bound comes first: it is in the select list, before the WHERE clause.
    return values if results_up_to is None else (results_up_to, results_up_to, *values)


def rows_within(rows: Iterable[Sequence[Any]], max_bytes: int | None) -> list[Sequence[Any]]:
    """The first of ``rows`` (target rows, with their results) up to and including the one
    whose result takes their results past ``max_bytes`` characters; all of them without a
    bound. Rows past it are never fetched: a cursor steps one row at a time."""
    if max_bytes is None:
        return list(rows)
    page: list[Sequence[Any]] = []
    size = 0
    for row in rows:
        page.append(row)
        result = row[_RESULT]
        size += 0 if result is None else len(result)
        if size >= max_bytes:
            break
    return page


@functools.cache
def _query(results: bool, bounded: bool, outcomes: bool, cut: bool, placeholder: str) -> str:
    result = "result" if results else "NULL"
    # A result over the cut is left unread; its size says what a link to it shows. The size
    # is its column, or for a row stored before the column, its length (which reads it).
    size = "coalesce(result_size, length(result))"
    wanted = (
        _COLUMNS.format(result=f"CASE WHEN {size} > ? THEN NULL ELSE result END")
        + f", CASE WHEN {size} > ? THEN {size} END"
        if cut
        else _COLUMNS.format(result=result)
    )
    columns = _COLUMNS.format(result=result) + (", result_size" if cut else "")
    where = "job_id = ? AND idx > ?"
    if outcomes:
        where += " AND status IN ('done', 'failed')"
    if not bounded:
        sql = f"SELECT {wanted} FROM targets WHERE {where} ORDER BY idx LIMIT ?"
    else:
        # The result goes through the window as it is stored (a TOAST pointer), read only
        # for the rows the page keeps.
        sql = (
            f"SELECT {wanted} FROM (SELECT {columns}, "
            "coalesce(octet_length(result), 0) AS size, "
            "sum(coalesce(octet_length(result), 0)) OVER (ORDER BY idx) AS upto "
            f"FROM targets WHERE {where} ORDER BY idx LIMIT ?) AS page "
            "WHERE upto - size < ? ORDER BY idx"
        )
    return sql.replace("?", placeholder)
