"""What every SQL backend shares: row mapping, and an outcome's stored values.

Backends keep their own SQL; these keep one rule in one place: how a stored row becomes a
:class:`Job` or a :class:`TargetStatus`, and what an outcome stores. A new job's checks and
caps are in :mod:`._new_job`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from typing import Any

from .._errors import ResultTooLarge
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
    "delivery_from_row",
    "dumps",
    "event_from_row",
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
#: Decodes stored results: each is one JSON object written by Result.to_json_text.
_DECODER = json.JSONDecoder()


def _job_of(values: Sequence[Any]) -> Job:
    """A :class:`Job` of ``values`` in field order, its slots set directly: it is made with
    every stored outcome, and the frozen dataclass __init__ costs an object.__setattr__ per
    field."""
    job = _new(Job)
    for set_field, value in zip(_JOB_SETTERS, values, strict=True):
        set_field(job, value)
    return job


def job_from_row(row: Sequence[Any]) -> Job:
    """A :class:`Job` from a row of the job columns, in the dataclass's order (metadata as
    its stored JSON text)."""
    job = _job_of(row)
    _set_job_status(job, _JOB_STATES[row[1]])
    _set_job_metadata(job, metadata_from_text(row[12]))
    return job


def metadata_from_text(text: str) -> dict[str, str]:
    """Stored metadata text as a dict (a fresh one: a caller may change what it is given)."""
    if text == "{}":
        return {}
    return dict(_metadata_cached(text))


@functools.lru_cache(maxsize=256)
def _metadata_cached(text: str) -> tuple[tuple[str, str], ...]:
    # A drain reads its job's row back with each outcome: the same text each time.
    return tuple(json.loads(text).items())


def target_from_row(row: Sequence[Any], *, decode: bool = True) -> TargetStatus:
    """A :class:`TargetStatus` from ``idx, url, status, result, error, hint, options,
    finished_at, attempts, custom_id``.

    With ``decode`` false its result is decoded when first read (see :class:`StoredTarget`):
    for reads made on the event loop's thread, of small results. A read on a store thread
    decodes here, so that the loop never decodes a big result.
    """
    # Called for every row of a status read: no per-row enum call, no dataclass __init__ (its
    # frozen object.__setattr__ per field cost as much as the SQL).
    idx, url, status, result, error, hint, options, finished_at, attempts, custom_id = row
    target = _new(StoredTarget)
    _set_idx(target, idx)
    _set_url(target, url)
    _set_status(target, _TARGET_STATES[status])
    if result is None:
        _set_result(target, None)
    elif decode:
        _set_result(target, _decode_result(result))
    else:
        _set_result_text(target, result)
    _set_error(target, error)
    _set_hint(target, hint)
    # Most targets have the default options, stored as "{}": a comparison, not a cache lookup.
    _set_options(target, DEFAULT_OPTIONS if options == "{}" else options_from_text(options))
    _set_finished_at(target, finished_at)
    _set_attempts(target, attempts)
    _set_custom_id(target, custom_id)
    return target


class StoredTarget(TargetStatus):
    """A :class:`TargetStatus` read from a store: its ``result`` JSON is decoded on first read.

    A status read is mostly looked at for statuses, counts and errors; decoding every result up
    front cost as much as the query. Otherwise it is a TargetStatus: frozen, and equal to (and
    hashed as) the TargetStatus with the same fields.
    """

    __slots__ = ("_result_text",)
    _result_text: str  # the stored JSON, until the first read decodes it

    @property
    def result(self) -> Result | None:
        """The stored result, decoded once."""
        try:
            return _get_result(self, StoredTarget)  # type: ignore[no-any-return]
        except AttributeError:  # not decoded yet
            value = _decode_result(self._result_text)
            _set_result(self, value)
            return value

    @result.setter
    def result(self, value: Result | None) -> None:
        # Reached only through object.__setattr__ (dataclasses.replace, unpickling): the
        # frozen __setattr__ refuses a plain assignment first.
        _set_result(self, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TargetStatus):
            return NotImplemented
        return _fields_of(self) == _fields_of(other)

    __hash__ = TargetStatus.__hash__

    def __repr__(self) -> str:
        return TargetStatus.__repr__(self).replace(type(self).__qualname__, "TargetStatus", 1)


def _decode_result(text: str) -> Result:
    obj = _DECODER.raw_decode(text)[0]  # our own compact JSON: no whitespace scans needed
    return Result(obj["content"], obj["meta"])


def _fields_of(target: TargetStatus) -> tuple[Any, ...]:
    return tuple(getattr(target, name) for name in _TARGET_FIELDS)


_TARGET_FIELDS = tuple(f.name for f in dataclasses.fields(TargetStatus))
_new = object.__new__
# The slots' own descriptors: they set a frozen instance's fields without its __setattr__.
_JOB_SETTERS = tuple(Job.__dict__[f.name].__set__ for f in dataclasses.fields(Job))
(
    _set_job_id,
    _set_job_status,
    _set_job_error,
    _set_job_total,
    _set_job_done,
    _set_job_failed,
    _set_job_caller,
    _set_job_class,
    _set_job_idem,
    _set_job_created,
    _set_job_updated,
    _set_job_expires,
    _set_job_metadata,
    _set_job_parent,
) = _JOB_SETTERS
_slot = TargetStatus.__dict__
_get_result = _slot["result"].__get__
_set_idx, _set_url, _set_status, _set_result, _set_error, _set_hint = (
    _slot[name].__set__ for name in ("idx", "url", "status", "result", "error", "hint")
)
_set_options, _set_finished_at, _set_attempts, _set_custom_id = (
    _slot[name].__set__ for name in ("options", "finished_at", "attempts", "custom_id")
)
_set_result_text = StoredTarget.__dict__["_result_text"].__set__


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
    if error is None:
        return TargetState.DONE, result_text, None, hint
    return (
        TargetState.FAILED,
        result_text,
        safe_text(error),
        None if hint is None else safe_text(hint),
    )


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
