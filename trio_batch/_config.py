"""The runner's configuration: limits and timings, validated when built."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ._event import JobEvent
from ._retry import RetryPolicy
from ._text import MAX_MILLISECONDS, MAX_SECONDS, check_seconds, safe_text

__all__ = ["COMMAND_TARGET_TIMEOUT", "ClassLimits", "Config"]

#: The target timeout of ``trio-batch run`` and ``trio-batch serve`` unless told otherwise
#: (seconds): above the built-in fetcher's own limits (30 s to fetch, 10 s to process), so it
#: only cuts a custom fetch function that hangs. The library's default stays None.
COMMAND_TARGET_TIMEOUT = 60.0


def _check_number(owner: str, name: str, value: object, *, integer: bool) -> None:
    if not integer:
        # Past a century is refused here, not where it is used: a ttl of 1e300 was stored,
        # and every later listing of the job failed to show its expiry as a date. A store
        # timeout goes to PostgreSQL in milliseconds, which it takes up to 2**31 - 1.
        high = MAX_MILLISECONDS if name == "store_timeout" else MAX_SECONDS
        check_seconds(f"{owner}.{name}", value, high=high)
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{name} must be an integer, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{owner}.{name} must not be negative (got {safe_text(value, 40)})")


@dataclass(frozen=True, slots=True)
class ClassLimits:
    """Caps for one ``caller_class`` that override the :class:`Config`'s; None keeps the Config's.

    For example ``ClassLimits(targets_per_job=4)`` for anonymous callers.
    """

    targets_per_job: int | None = None
    jobs_per_caller: int | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                _check_number("ClassLimits", f.name, value, integer=True)
                if value == 0:
                    raise ValueError(f"ClassLimits.{f.name} must be at least 1, or None")


@dataclass(frozen=True, slots=True)
class Config:
    """Runner limits and timings, in seconds and counts.

    A number given as 0 takes its default; a negative one raises ValueError, as does a number
    of seconds that is not finite or is past a century (``store_timeout``: past 2**31 - 1
    milliseconds, about 24.8 days, the most PostgreSQL takes).

    - ``ttl``: how long a job's lease lasts after its latest write (24 h).
    - ``targets_per_job``: most targets one job may have (32); past it, :class:`TooManyTargets`.
    - ``jobs_per_caller``: most live jobs one caller may have (1); past it, :class:`CallerBusy`.
    - ``jobs_total``: most live jobs in all (8); past it, :class:`Busy`.
    - ``target_timeout``: a fetch running longer fails its target with error ``"timeout"``;
      None (the default) lets a fetch run as long as it likes.
    - ``cancel_grace``: after a cancel, how long the in-flight fetch may still run before it is
      cancelled and stored as failed with error ``"cancelled"``; None (the default) waits for it.
    - ``class_limits``: per ``caller_class`` overrides of ``targets_per_job`` and
      ``jobs_per_caller`` (see :class:`ClassLimits`).
    - ``purge_interval``: how often lapsed jobs are deleted in the background (5 minutes).
    - ``store_retry_for``: how long an outcome write that the database refuses is retried, with
      backoff, before its job is failed (30 s).
    - ``heartbeat_interval``: where runners share a database (PostgreSQL), how often each
      tells the others it is alive (5 s).
    - ``runner_timeout``: where runners share a database, how long a runner may be silent
      before another takes it for dead and fails its live jobs with error ``"restart"`` (30 s);
      longer than ``heartbeat_interval``.
    - ``poll_interval``: where runners share a database, how often a runner asks it whether
      another runner cancelled (or reaped) a job it drains, and how often ``wait``/``watch``
      re-read a job that another runner drains (2 s).
    - ``store_timeout``: where the store is a database server (PostgreSQL), the longest one
      store call may take, waiting for the database included, before it fails with
      :class:`~trio_batch.StoreUnavailable` (5 s; ``trio-batch serve`` then answers 503 with
      ``Retry-After``). The front ends open their store with it; a store you open yourself
      takes it as ``open_store(url, store_timeout=...)``.
    - ``max_result_size``: longest result stored, in characters of its JSON (content and meta
      together, 16 MiB); a fetch returning more fails its target with
      :class:`~trio_batch.ResultTooLarge`, for every fetch function.
    - ``retry``: how a target whose attempt failed with a retryable error is tried again, before
      the next target starts (see :class:`~trio_batch.RetryPolicy`); None (the default) makes
      one attempt only.
    - ``on_terminal``: an async callback given each job's :class:`~trio_batch.JobEvent` after
      the transaction that made the job terminal has committed (done, failed, partial,
      cancelled, failed by a restart or a shutdown). The event is written to the store's
      outbox in that transaction, so it is called at least once even if the process dies
      (then by the next runner): a callback that raises or takes over a minute is called
      again later with backoff, for up to a day, so it should be idempotent (the event's
      ``id`` stays the same). None (the default): no callback.
    """

    ttl: float = 86400.0
    targets_per_job: int = 32
    jobs_per_caller: int = 1
    jobs_total: int = 8
    target_timeout: float | None = None
    cancel_grace: float | None = None
    class_limits: Mapping[str, ClassLimits] = field(default_factory=dict)
    purge_interval: float = 300.0
    store_retry_for: float = 30.0
    heartbeat_interval: float = 5.0
    runner_timeout: float = 30.0
    retry: RetryPolicy | None = None
    poll_interval: float = 2.0
    store_timeout: float = 5.0
    max_result_size: int = 16 * 1024 * 1024
    on_terminal: Callable[[JobEvent], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "on_terminal":
                if value is not None and not callable(value):
                    raise TypeError("Config.on_terminal must be an async callable or None")
                continue
            if f.name == "retry":
                if value is not None and not isinstance(value, RetryPolicy):
                    raise TypeError(
                        f"Config.retry must be a RetryPolicy or None, not {type(value).__name__}"
                    )
                continue
            if f.name == "class_limits":
                if not isinstance(value, Mapping) or not all(
                    isinstance(k, str) and isinstance(v, ClassLimits) for k, v in value.items()
                ):
                    raise TypeError("Config.class_limits must map class names to ClassLimits")
                object.__setattr__(self, f.name, MappingProxyType(dict(value)))
                continue
            if value is None and "None" in str(f.type):
                continue
            _check_number("Config", f.name, value, integer=f.type == "int")
            if value == 0:
                object.__setattr__(self, f.name, f.default)
        if self.heartbeat_interval >= self.runner_timeout:
            raise ValueError(
                f"Config.heartbeat_interval ({self.heartbeat_interval:g} s) must be shorter "
                f"than Config.runner_timeout ({self.runner_timeout:g} s)"
            )

    def limits_for(self, caller_class: str) -> tuple[int, int]:
        """``(targets_per_job, jobs_per_caller)`` for a caller of ``caller_class``."""
        limits = self.class_limits.get(caller_class)
        if limits is None:
            return self.targets_per_job, self.jobs_per_caller
        return (
            self.targets_per_job if limits.targets_per_job is None else limits.targets_per_job,
            self.jobs_per_caller if limits.jobs_per_caller is None else limits.jobs_per_caller,
        )
