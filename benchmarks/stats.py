"""Small statistics helpers: medians, percentiles and unit conversions."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


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


def micros(seconds: float) -> float:
    """Seconds to microseconds."""
    return seconds * 1e6


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, or NaN when the denominator is zero or NaN."""
    if not denominator or math.isnan(denominator):
        return math.nan
    return numerator / denominator
