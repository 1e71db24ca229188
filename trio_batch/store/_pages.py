"""The SQL of a page of a job's targets, bounded by a count and by its results' size: one
text for both backends, in their placeholders.

What an export, a retry's selection and a watcher read. A result can be megabytes, so a page
of a fixed count of rows is not bounded in memory; a bounded page sums its results' sizes in
the database and ends with the row that takes them past the bound.
"""

from __future__ import annotations

import functools

__all__ = ["targets_page"]

#: The targets' columns, in :func:`~._rows.target_from_row`'s order, the result left to fill.
_COLUMNS = "idx, url, status, {result}, error, hint, options, finished_at, attempts, custom_id"


def targets_page(
    job_id: str,
    after: int,
    *,
    limit: int,
    max_bytes: int | None = None,
    results: bool = True,
    outcomes: bool = False,
    placeholder: str = "?",
) -> tuple[str, tuple[str | int, ...]]:
    """The SQL and its parameters for up to ``limit`` of a job's targets with an index above
    ``after``, in ``idx`` order.

    ``outcomes``: only targets with an outcome (``done`` or ``failed``, what a watcher reads);
    else every target (an export's read). Without ``results`` each result reads as NULL and
    none is loaded. ``max_bytes`` (with ``results``): the page ends with the row that takes
    its results past this many characters (the sizes summed in the database, so no row past
    it is read into memory); the first row always comes, however big. ``placeholder``:
    ``"?"`` for SQLite, ``"%s"`` for PostgreSQL."""
    bounded = max_bytes is not None and results  # without results nothing is loaded
    sql = _query(results, bounded, outcomes, placeholder)
    if max_bytes is not None and bounded:
        return sql, (job_id, after, limit, max_bytes)
    return sql, (job_id, after, limit)


@functools.cache
def _query(results: bool, bounded: bool, outcomes: bool, placeholder: str) -> str:
    columns = _COLUMNS.format(result="result" if results else "NULL")
    where = "job_id = ? AND idx > ?"
    if outcomes:
        where += " AND status IN ('done', 'failed')"
    if not bounded:
        sql = f"SELECT {columns} FROM targets WHERE {where} ORDER BY idx LIMIT ?"
    else:
        sql = (
            f"SELECT {columns} FROM (SELECT {columns}, "
            "coalesce(length(result), 0) AS size, "
            "sum(coalesce(length(result), 0)) OVER (ORDER BY idx) AS upto "
            f"FROM targets WHERE {where} ORDER BY idx LIMIT ?) AS page "
            "WHERE upto - size < ? ORDER BY idx"
        )
    return sql.replace("?", placeholder)
