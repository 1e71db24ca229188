"""Small helpers the benchmarks share: medians, percentiles, and the machine's description."""

from __future__ import annotations

import math
import os
import platform
import sqlite3
import statistics
from collections.abc import Sequence

import trio_batch


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (NaN for an empty sequence)."""
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values`` by the nearest-rank method."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, or NaN when the denominator is zero or NaN."""
    if not denominator or math.isnan(denominator):
        return math.nan
    return numerator / denominator


def machine(postgres: str | None = None) -> str:
    """One line naming what a table was measured on: cores, load average, Python, SQLite,
    PostgreSQL (``postgres``, its server version, if one was used) and trio_batch."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    parts = [
        f"{os.cpu_count()} cores (load average {load})",
        f"Python {platform.python_version()}",
        f"SQLite {sqlite3.sqlite_version}",
    ]
    if postgres is not None:
        parts.append(f"PostgreSQL {postgres}")
    parts.append(f"trio_batch {trio_batch.__version__}")
    return "; ".join(parts)
