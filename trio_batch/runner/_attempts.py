"""One target, fetched: the target timeout, the cancel grace, and retries with backoff.

:class:`Attempts` turns every way a fetch can end into an outcome the runner stores: a
:class:`~trio_batch.Result`, or a :class:`Failure` (an exception, a timeout, a fetch cut after
the cancel grace, a return value that is not a Result). With ``Config.retry`` it tries a target
again after a retryable failure, before the drain moves on to the next target.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from .._config import Config
from .._model import Result, Target
from .._retry import RetryNotice, is_retryable, retry_after_of
from .._text import safe_text
from .._tracing import NO_TRACING, Tracing
from ._drain import _Drain

__all__ = [
    "Attempts",
    "Failure",
    "FetchFunc",
    "current_caller",
    "current_job",
    "failure_from_exception",
]

FetchFunc = Callable[[Target], Awaitable[Result]]
"""The injected per-target work: an async function from a :class:`Target` to a :class:`Result`.

Raising any ``Exception`` fails that target (the error names the exception's type and message;
an exception's ``hint`` attribute, if it is a string, becomes the target's hint). The job goes on.
"""


_CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "trio_batch_caller", default=None
)


def current_caller() -> str | None:
    """The caller whose job's target is being fetched, when called from a fetch function the
    runner is running (its drain task and the tasks that starts); None anywhere else.

    For a fetch function that shares something between callers fairly (the built-in fetcher's
    processing workers, say).
    """
    return _CALLER.get()


_JOB: contextvars.ContextVar[str | None] = contextvars.ContextVar("trio_batch_job", default=None)


def current_job() -> str | None:
    """The id of the job whose target is being fetched, when called from a fetch function the
    runner is running (as :func:`current_caller`); None anywhere else.

    For a fetch function that keeps something per job (the built-in fetcher's snapshots).
    """
    return _JOB.get()


@dataclass(frozen=True, slots=True)
class Failure:
    """How one attempt at a target failed, as it is stored if it is the last."""

    error: str
    hint: str | None = None
    retryable: bool = False  # another attempt may succeed
    retry_after: float | None = None  # the least the next attempt should wait, in seconds


def failure_from_exception(exc: Exception) -> Failure:
    """The stored failure of a fetch that raised ``exc``: never raises, whatever ``exc`` is."""
    message = safe_text(exc)
    error = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    try:
        hint = getattr(exc, "hint", None)
    except Exception:  # a hostile property, like a hostile __str__, must not fail the job
        hint = None
    return Failure(
        safe_text(error),
        None if hint is None else safe_text(hint),
        retryable=is_retryable(exc),
        retry_after=retry_after_of(exc),
    )


def _cut_short(failure: Failure, attempt: int, attempts: int) -> Failure:
    """``failure`` with a hint that the job's cancel stopped its retries."""
    note = f"the job was cancelled after attempt {attempt} of {attempts}, so it was not retried"
    hint = note if not failure.hint else f"{failure.hint} ({note})"
    return dataclasses.replace(failure, hint=safe_text(hint), retryable=False)


class Attempts:
    """Fetches one target for a drain: each attempt bounded, retried as the policy allows."""

    def __init__(
        self,
        fetch: FetchFunc,
        config: Config,
        log: logging.Logger,
        on_retry: Callable[[RetryNotice], None] | None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.fetch = fetch
        self.tracing = tracing
        # The no-op base's hooks do nothing: not calling them saves a context per attempt.
        self._traced = type(tracing) is not Tracing
        self.config = config
        self.log = log
        self.on_retry = on_retry
        self._rng = random.Random()  # retry jitter

    def enter_job(self, drain: _Drain) -> None:
        """Ready the calling drain task for ``drain``'s attempts (:func:`current_caller`)."""
        _CALLER.set(drain.caller)  # the drain task's own context: one job, one caller
        _JOB.set(drain.job_id)

    async def run(self, drain: _Drain, idx: int, target: Target) -> tuple[Result | Failure, int]:
        """Fetch the target, again after a retryable failure as ``Config.retry`` allows.

        Call :meth:`enter_job` first, in the drain task. Returns the outcome to store and how
        many attempts it took. Between attempts the target
        stays ``running`` and nothing is written. Cancellation: a cancel of the job
        (:meth:`Runner.cancel`) cuts a wait between attempts short, and no attempt starts after
        it; the last failure is returned, its hint saying so. Shutdown cancels a wait as it
        cancels a fetch.
        """
        policy = self.config.retry
        attempt = 1
        while True:
            if self._traced:
                with self.tracing.attempt(drain.span, idx, target, attempt) as span:
                    outcome = await self._fetch_one(drain, idx, target)
                    self.tracing.attempt_ended(
                        span, None if isinstance(outcome, Result) else outcome.error
                    )
            else:
                outcome = await self._fetch_one(drain, idx, target)
            if (
                isinstance(outcome, Result)
                or policy is None
                or not outcome.retryable
                or attempt >= policy.attempts
            ):
                return outcome, attempt
            if drain.cancel_requested:
                return _cut_short(outcome, attempt, policy.attempts), attempt
            delay = policy.delay(attempt, retry_after=outcome.retry_after, rng=self._rng)
            self.log.info(
                "target will be retried",
                extra={"job_id": drain.job_id, "idx": idx, "attempt": attempt, "delay": delay},
            )
            self.tracing.retry_wait(drain.span, idx, attempt, delay)
            if self.on_retry is not None:
                notice = RetryNotice(
                    drain.job_id, idx, target.url, attempt, policy.attempts, outcome.error, delay
                )
                with contextlib.suppress(Exception):  # an observer's bug must not fail a job
                    self.on_retry(notice)
            with trio.CancelScope() as wait:
                drain.backoff_scope = wait
                try:
                    await trio.sleep(delay)
                finally:
                    drain.backoff_scope = None
            if wait.cancelled_caught:
                return _cut_short(outcome, attempt, policy.attempts), attempt
            attempt += 1

    async def _fetch_one(self, drain: _Drain, idx: int, target: Target) -> Result | Failure:
        """Run the fetch function on one target; every way it can fail becomes a Failure."""
        timeout = self.config.target_timeout
        if timeout is None and self.config.cancel_grace is None:
            return await self._fetch_unbounded(drain, idx, target)
        with trio.CancelScope() as scope:
            if timeout is not None:
                scope.deadline = trio.current_time() + timeout
            drain.fetch_scope = scope
            try:
                result = await self.fetch(target)
            except Exception as exc:
                return self._failed(drain, idx, exc)
            finally:
                drain.fetch_scope = None
        if scope.cancelled_caught:
            if drain.cancel_deadline is not None and trio.current_time() >= drain.cancel_deadline:
                return Failure(
                    "cancelled",
                    hint=f"the job was cancelled and this fetch ran past cancel_grace "
                    f"({self.config.cancel_grace:g} s)",
                )
            return Failure(
                "timeout",
                hint=f"the fetch ran longer than target_timeout ({timeout:g} s); "
                "raise Config.target_timeout if the target is just slow",
                retryable=True,
            )
        return _checked(result)

    async def _fetch_unbounded(self, drain: _Drain, idx: int, target: Target) -> Result | Failure:
        """One attempt at the target with nothing that may cut it short: no scope of its own
        (one costs on every target). Every way it can fail becomes a Failure."""
        try:
            result = await self.fetch(target)
        except Exception as exc:
            return self._failed(drain, idx, exc)
        return _checked(result)

    def _failed(self, drain: _Drain, idx: int, exc: Exception) -> Failure:
        """The failure of a fetch that raised ``exc``, logged."""
        failure = failure_from_exception(exc)
        if self.log.isEnabledFor(logging.INFO):  # once per failed target: no context for nothing
            self.log.info(
                "target failed", extra={"job_id": drain.job_id, "idx": idx, "error": failure.error}
            )
        return failure


def _checked(result: object) -> Result | Failure:
    """``result`` if the fetch function returned a Result, else the failure saying so."""
    if not isinstance(result, Result):
        return Failure(
            f"the fetch function returned {safe_text(type(result).__name__)}, not a Result",
            hint="return trio_batch.Result(content, meta) from the fetch function",
        )
    return result
