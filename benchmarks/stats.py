"""What the benchmarks share: a ratio that tolerates a zero, and the machine's description."""

from __future__ import annotations

import math
import os
import platform
import sqlite3

import trio_batch


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
