"""RetryPolicy: its validation and the delays it gives (the runner's use is in test_retries)."""

from __future__ import annotations

import math
import random

import pytest

from trio_batch import RetryableError, RetryPolicy
from trio_batch._retry import is_retryable, retry_after_of


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"attempts": 0}, "at least 1"),
        ({"attempts": 2.5}, "must be an integer"),
        ({"attempts": True}, "must be an integer"),
        ({"first_delay": -1}, "non-negative"),
        ({"max_delay": math.inf}, "finite"),
        ({"first_delay": 10, "max_delay": 5}, "must not be less than first_delay"),
        ({"multiplier": 0.5}, "at least 1"),
        ({"jitter": 1.5}, "fraction from 0 to 1"),
        ({"jitter": "0.1"}, "must be a number"),
        ({"jitter": math.nan}, "finite"),
        ({"max_delay": 10**400}, "finite"),  # was OverflowError
    ],
)
def test_bad_values_are_refused_clearly(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_delays_grow_by_the_multiplier_and_stop_at_max_delay() -> None:
    policy = RetryPolicy(attempts=10, first_delay=1.0, max_delay=10.0, multiplier=3.0, jitter=0)
    rng = random.Random(1)
    assert [policy.delay(n, rng=rng) for n in range(1, 6)] == [1.0, 3.0, 9.0, 10.0, 10.0]
    assert policy.delay(10_000, rng=rng) == 10.0  # no overflow however many attempts


def test_jitter_spreads_each_delay_within_its_bounds() -> None:
    policy = RetryPolicy(first_delay=2.0, max_delay=100.0, jitter=0.25)
    rng = random.Random(7)
    delays = [policy.delay(1, rng=rng) for _ in range(2000)]
    assert min(delays) >= 1.5 and max(delays) <= 2.5
    assert max(delays) - min(delays) > 0.9  # it does spread, both ways
    assert min(delays) < 1.9 and max(delays) > 2.1


def test_retry_after_is_a_floor_still_capped_by_max_delay() -> None:
    policy = RetryPolicy(first_delay=1.0, max_delay=30.0, jitter=0)
    rng = random.Random(0)
    assert policy.delay(1, retry_after=12.0, rng=rng) == 12.0
    assert policy.delay(1, retry_after=0.2, rng=rng) == 1.0
    assert policy.delay(1, retry_after=3600.0, rng=rng) == 30.0


def test_retryable_errors_and_attributes() -> None:
    error = RetryableError("busy", hint="later", retry_after=5)
    assert is_retryable(error) and retry_after_of(error) == 5.0 and error.hint == "later"
    assert not is_retryable(ValueError("no"))

    class Flagged(Exception):
        retryable = True
        retry_after = "soon"  # not a number: ignored

    assert is_retryable(Flagged()) and retry_after_of(Flagged()) is None

    class Hostile(Exception):
        def __getattr__(self, name: str) -> object:
            raise RuntimeError("no attributes for you")

    assert not is_retryable(Hostile()) and retry_after_of(Hostile()) is None
    negative = RetryableError("x", retry_after=-3)
    assert retry_after_of(negative) is None


@pytest.mark.parametrize(
    "value", [10**400, math.inf, math.nan, -math.inf], ids=["int-past-floats", "inf", "nan", "-inf"]
)
def test_a_retry_after_past_any_finite_number_is_ignored(value: float) -> None:
    assert retry_after_of(RetryableError("x", retry_after=value)) is None
