"""Per-target retries: the policy (how many attempts, how long between) and what asks for one.

A fetch function asks for a retry by raising :class:`RetryableError`, or any exception whose
``retryable`` attribute is true (the built-in fetcher's network errors, timeouts and 408, 425,
429, 500, 502, 503 and 504 answers). Every other exception fails its target at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ._text import is_finite, safe_text

__all__ = ["RetryNotice", "RetryPolicy", "RetryableError", "is_retryable", "retry_after_of"]


class RetryableError(Exception):
    """Raised by a fetch function: this attempt failed, but another one may succeed.

    ``hint`` becomes the target's hint if no attempt succeeds. ``retry_after`` (seconds, as a
    server's ``Retry-After`` says) is a floor for the next delay, still capped by the policy's
    ``max_delay``. Without a :class:`RetryPolicy` it fails the target like any exception.
    """

    retryable = True

    def __init__(
        self, message: str, *, hint: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.hint = hint
        self.retry_after = retry_after


def is_retryable(exc: BaseException) -> bool:
    """True if ``exc`` asks for another attempt (its ``retryable`` attribute is true)."""
    try:
        return bool(getattr(exc, "retryable", False))
    except Exception:  # a hostile __getattr__ or __bool__: not retryable
        return False


def retry_after_of(exc: BaseException) -> float | None:
    """``exc``'s ``retry_after`` if it is a finite, non-negative number of seconds, else None."""
    try:
        value = getattr(exc, "retry_after", None)
    except Exception:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if is_finite(value) and value >= 0 else None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed attempt at a target is retried, before the next target starts.

    ``attempts`` counts the first try (1 means no retry). The delay before attempt *n + 1* is
    ``first_delay * multiplier ** (n - 1)`` capped at ``max_delay``, spread at random by up to
    ``jitter`` (a fraction: 0.1 is +-10%), raised to the failure's ``retry_after`` if that is
    longer, and never more than ``max_delay``. Bad values raise ValueError.
    """

    attempts: int = 3
    first_delay: float = 1.0
    max_delay: float = 60.0
    multiplier: float = 2.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise ValueError(f"RetryPolicy.attempts must be an integer, not {self.attempts!r}")
        if self.attempts < 1:
            raise ValueError(
                f"RetryPolicy.attempts counts the first try, so it must be at least 1, "
                f"not {self.attempts}"
            )
        for name in ("first_delay", "max_delay", "multiplier", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"RetryPolicy.{name} must be a number, not {value!r}")
            if not is_finite(value) or value < 0:
                raise ValueError(
                    f"RetryPolicy.{name} must be a finite, non-negative number, "
                    f"not {safe_text(value, 40)}"
                )
        if self.max_delay < self.first_delay:
            raise ValueError(
                f"RetryPolicy.max_delay ({self.max_delay:g}) must not be less than first_delay "
                f"({self.first_delay:g})"
            )
        if self.multiplier < 1:
            raise ValueError(
                f"RetryPolicy.multiplier must be at least 1 (delays never shrink), "
                f"not {self.multiplier:g}"
            )
        if self.jitter > 1:
            raise ValueError(f"RetryPolicy.jitter is a fraction from 0 to 1, not {self.jitter:g}")

    def delay(
        self, failed_attempt: int, *, retry_after: float | None = None, rng: random.Random
    ) -> float:
        """Seconds to wait after attempt ``failed_attempt`` (1 for the first try) failed."""
        exponent = min(failed_attempt - 1, 1024)  # far past any max_delay; no overflow
        try:
            base = min(self.first_delay * self.multiplier**exponent, self.max_delay)
        except OverflowError:
            base = self.max_delay
        spread = base * (1 + rng.uniform(-self.jitter, self.jitter))
        if retry_after is not None:
            spread = max(spread, retry_after)
        return min(spread, self.max_delay)


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """A target's attempt failed and it will be tried again after ``delay`` seconds.

    Given to ``open_runner``'s ``on_retry`` hook as it happens (the command line shows it in its
    progress). ``attempt`` is the attempt that failed (1 for the first try), ``attempts`` the
    policy's limit, ``error`` what the failure will be stored as if no attempt succeeds.
    """

    job_id: str
    idx: int
    url: str
    attempt: int
    attempts: int
    error: str
    delay: float
