"""What every SQL backend shares: row mapping, and an outcome's stored values.

Backends keep their own SQL; these keep one rule in one place: how a stored row becomes a
:class:`Job` or a :class:`TargetStatus`, and what an outcome stores. A new job's checks and
caps are in :mod:`._new_job`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from .._errors import JobLive, ResultTooLarge
from .._event import Delivery, JobEvent
from .._model import (
    DEFAULT_OPTIONS,
    Job,
    JobState,
    Options,
    OutcomeWrite,
    Result,
    TargetState,
    TargetStatus,
)
from .._text import safe_text

__all__ = [
    "attempt_values",
    "delivery_from_row",
    "dumps",
    "event_from_row",
    "forgettable",
    "job_from_row",
    "metadata_from_text",
    "options_from_text",
    "options_text",
    "outcome_values",
    "target_from_row",
    "write_values",
]


#: Status text -> enum member: a dict lookup is several times cheaper than calling the enum.
_JOB_STATES = {state.value: state for state in JobState}
_TARGET_STATES = {state.value: state for state in TargetState}


def job_from_row(row: Sequence[Any]) -> Job:
    """A :class:`Job` from a row of the job columns, in the dataclass's order (metadata as
    its stored JSON text)."""
    job_id, status, error, total, done, failed, caller, caller_class, key = row[:9]
    created_at, updated_at, expires_at, metadata, parent_id = row[9:14]
    return Job(
        job_id,
        _JOB_STATES[status],
        error,
        total,
        done,
        failed,
        caller,
        caller_class,
        key,
        created_at,
        updated_at,
        expires_at,
        metadata_from_text(metadata),
        parent_id,
    )


def metadata_from_text(text: str) -> dict[str, str]:
    """Stored metadata text as a dict (a fresh one: a caller may change what it is given)."""
    if text == "{}":
        return {}
    return dict(_metadata_cached(text))


@functools.lru_cache(maxsize=256)
def _metadata_cached(text: str) -> tuple[tuple[str, str], ...]:
    # A drain reads its job's row back with each outcome: the same text each time.
    return tuple(json.loads(text).items())


def target_from_row(row: Sequence[Any]) -> TargetStatus:
    """A :class:`TargetStatus` from ``idx, url, status, result, error, hint, options,
    finished_at, attempts, custom_id``, and the length of a result left unread if the row
    has it (see :func:`~._pages.targets_page`'s ``results_up_to``)."""
    idx, url, status, result, error, hint, options, finished_at, attempts, custom_id = row[:10]
    unread = row[10] if len(row) > 10 else None
    return TargetStatus(
        idx,
        url,
        _TARGET_STATES[status],
        None if result is None else _decode_result(result),
        error,
        hint,
        # Most targets have the default options, stored as "{}".
        DEFAULT_OPTIONS if options == "{}" else options_from_text(options),
        finished_at,
        attempts,
        custom_id,
        None if unread is None else int(unread),
    )


def _decode_result(text: str) -> Result:
    obj = json.loads(text)
    return Result(obj["content"], obj["meta"])


def dumps(obj: Any) -> str:
    """Compact, key-sorted JSON: how options (and id lists) are stored."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def options_text(options: Options) -> str:
    """How a target's options are stored: compact JSON with sorted keys."""
    return "{}" if options is DEFAULT_OPTIONS else _options_json(options)


@functools.lru_cache(maxsize=1024)
def _options_json(options: Options) -> str:
    # Most targets share a handful of option sets; equal options have equal JSON.
    return dumps(options.to_json())


@functools.lru_cache(maxsize=1024)
def options_from_text(text: str) -> Options:
    """Stored options text as :class:`Options`.

    Most targets share a handful of option sets; Options is immutable, so they can share one.
    """
    return Options.from_json(json.loads(text))


def outcome_values(
    result: Result | None,
    error: str | None,
    hint: str | None,
    max_result_size: int | None = None,
) -> tuple[TargetState, str | None, str | None, str | None]:
    """A target's stored outcome: ``(status, result_text, error, hint)``.

    Pass ``result`` for a success, or ``error`` (and optionally ``hint``) for a failure;
    ValueError for both or neither. A result that cannot be stored as JSON becomes a failure
    saying why, and so does one longer than ``max_result_size`` characters
    (:class:`~trio_batch.ResultTooLarge`; nothing of it is kept). Error and hint are stored as
    :func:`safe_text` makes them (bounded, no NUL), so every backend keeps the same text.
    """
    if (result is None) == (error is None):
        raise ValueError("pass exactly one of result= and error=")
    result_text: str | None = None
    if result is not None:
        try:
            result_text = result.to_json_text()
        except ValueError as exc:
            error = f"the fetch returned a Result that cannot be stored as JSON: {exc}"
            hint = "make Result.content a str and Result.meta a JSON-serialisable dict"
        too_long = max_result_size is not None and len(result_text or "") > max_result_size
        if too_long:
            too_large = ResultTooLarge(
                f"the result is {len(result_text or '')} characters of JSON; the limit is "
                f"{max_result_size} (Config.max_result_size)"
            )
            error = f"{type(too_large).__name__}: {too_large}"
            hint = (
                "return less from the fetch function (narrow it with grep, jq or a text mode), "
                "or raise Config.max_result_size"
            )
            result_text = None
    hint = None if hint is None else safe_text(hint)  # a success may have one too
    if error is None:
        return TargetState.DONE, result_text, None, hint
    return TargetState.FAILED, result_text, safe_text(error), hint


def write_values(
    write: OutcomeWrite,
) -> tuple[TargetState, str | None, str | None, str | None]:
    """:func:`outcome_values` of an :class:`OutcomeWrite`."""
    return outcome_values(write.result, write.error, write.hint, write.max_result_size)


def event_from_row(row: Any) -> JobEvent:
    """A :class:`JobEvent` of a row of ``EVENT_COLUMNS`` (both backends' order)."""
    (event_id, event, job_id, status, error, total, done, failed, at, url, callback, n, start) = (
        row[:13]
    )
    return JobEvent(
        trace_context=row[14] if len(row) > 14 else None,
        id=event_id,
        type=event,
        job_id=job_id,
        status=status,
        error=error,
        targets_total=int(total),
        targets_done=int(done),
        targets_failed=int(failed),
        at=float(at),
        url=url,
        callback=bool(callback),
        attempts=int(n),
        round_from=float(start),
        metadata=metadata_from_text(row[13] or "{}"),
    )


def delivery_from_row(row: Any) -> Delivery:
    """A :class:`Delivery` of a row of ``DELIVERY_COLUMNS`` (both backends' order)."""
    return Delivery(*row)


def attempt_values(
    event: JobEvent,
    owner: str | None,
    *,
    answer: str,
    delivered: bool,
    now: float,
    next_at: float | None,
) -> dict[str, str | float | None]:
    """``RECORD_DELIVERY``'s named parameters (both backends) for one attempt at ``event``
    under ``owner``'s lease: the answer and the attempt's time, ``delivered_at``, the next
    attempt's due time and ``gave_up_at`` (delivered: none due; else due at ``next_at``, or
    given up now without one), the event's job, its id, the owner and the round it was
    claimed in (a failure in an earlier round than the row's leaves the new round alone)."""
    return {
        "answer": answer,
        "now": now,
        "delivered_at": now if delivered else None,
        "due": None if delivered else next_at,
        "gave_up": None if delivered or next_at is not None else now,
        "job_id": event.job_id,
        "event_id": event.id,
        "owner": owner,
        "round_from": event.round_from,
    }


def forgettable(job: Job | None, caller: str | None) -> Job | None:
    """``job`` (as stored, None if unknown or lapsed) if ``caller`` may forget it now: None
    if it is unknown or another caller's; :class:`~trio_batch.JobLive` if it is still live."""
    if job is None or (caller is not None and job.caller != caller):
        return None
    if job.status.is_live:
        raise JobLive(f"job {job.id} is {job.status}; cancel it first, then forget it")
    return job
