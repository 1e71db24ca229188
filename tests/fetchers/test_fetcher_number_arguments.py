"""HttpFetcher's numeric arguments: one no fetch can use is refused at construction with a
TypeError or ValueError naming it, not found out at each fetch."""

from __future__ import annotations

import math

import pytest

from trio_batch.fetchers import HttpFetcher

#: What each did before it was refused, fetching from the suite's local server.
BAD = [
    ("max_bytes", math.nan),  # no comparison with NaN is true: every body let through
    ("max_bytes", math.inf),
    ("max_bytes", 1.5),
    ("max_bytes", 2**63),
    ("max_redirects", math.nan),  # every fetch: TypeError from range()
    ("max_redirects", True),
    ("max_connections", math.nan),  # every fetch hung to its timeout
    ("max_connections", 10**400),
    ("process_memory", 10**400),  # every processed body: OverflowError from setrlimit
    ("process_memory", 2**64),
    ("process_memory", math.inf),
    ("max_output", math.nan),
    ("context_lines", 2.5),
    ("process_workers", 1.5),
    ("process_workers_ceiling", math.inf),
    ("process_timeout", 1e308),  # every processed body: OverflowError from setrlimit
    ("timeout", 1e300),
    ("timeout", True),
    ("max_host_pause", 1e308),
    ("max_host_pause", True),  # taken as a pause of 1 s
    ("per_host_rate", True),  # taken as a rate of 1 a second
    ("per_host_rate", "5"),  # TypeError from math.isfinite, naming no argument
]


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={str(v)[:8]}" for n, v in BAD])
def test_an_argument_no_fetch_can_use_is_refused_when_the_fetcher_is_made(
    name: str, value: object
) -> None:
    with pytest.raises((TypeError, ValueError), match=name.split("_")[-1]) as refused:
        HttpFetcher(**{name: value})  # type: ignore[arg-type]
    assert len(str(refused.value)) < 300  # the value is cut short, never 400 digits


def test_the_largest_counts_a_c_long_holds_are_taken() -> None:
    fetcher = HttpFetcher(max_bytes=2**63 - 1, process_memory=2**63 - 1, max_redirects=0)
    assert fetcher.max_bytes == 2**63 - 1
