"""The value types and domain rules shared by every store backend, the runner and the front ends.

Everything here is plain data and pure functions: frozen dataclasses, string enums, job ids, the
terminal-status rule and the derived ``running`` state. Nothing in this module touches a
database or trio. The exceptions live in :mod:`._errors`, the configuration in :mod:`._config`,
what a caller submits (targets, options, metadata) and its checks in :mod:`._targets`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ._json import MAX_DEPTH, compact_json, nested_deeper_than

# What a caller submits lives in ._targets; importable from here too, as before.
from ._targets import (
    DEFAULT_OPTIONS as DEFAULT_OPTIONS,
)
from ._targets import (
    MAX_CALLER_LENGTH as MAX_CALLER_LENGTH,
)
from ._targets import (
    MAX_CUSTOM_ID_LENGTH as MAX_CUSTOM_ID_LENGTH,
)
from ._targets import (
    MAX_METADATA_KEY_LENGTH as MAX_METADATA_KEY_LENGTH,
)
from ._targets import (
    MAX_METADATA_KEYS as MAX_METADATA_KEYS,
)
from ._targets import (
    MAX_METADATA_VALUE_LENGTH as MAX_METADATA_VALUE_LENGTH,
)
from ._targets import (
    MAX_OPTION_LENGTH as MAX_OPTION_LENGTH,
)
from ._targets import (
    MAX_URL_LENGTH as MAX_URL_LENGTH,
)
from ._targets import (
    Options as Options,
)
from ._targets import (
    Target as Target,
)
from ._targets import (
    check_caller as check_caller,
)
from ._targets import (
    check_metadata as check_metadata,
)
from ._targets import (
    check_targets as check_targets,
)
from ._targets import (
    idem_key as idem_key,
)
from ._targets import (
    is_caller as is_caller,
)
from ._text import safe_text

__all__ = [
    "Job",
    "JobState",
    "Options",
    "OutcomeWrite",
    "Result",
    "Target",
    "TargetState",
    "TargetStatus",
    "final_status",
    "idem_key",
    "is_job_id",
    "new_job_id",
    "with_running",
]

# --------------------------------------------------------------------------------------------
# Job ids

#: A job id: 22 URL-safe characters (``secrets.token_urlsafe(16)``, 128 random bits). Ids made
#: before 0.2 may start with ``-``; they are still ids.
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{22}")


def new_job_id() -> str:
    """A fresh job id: 22 URL-safe characters, never starting with ``-``.

    An id starting with ``-`` would be read as an option on a command line
    (``trio-batch status -hY...``), so such draws (one in 64) are drawn again; what is left has
    about 127.9 random bits.
    """
    while True:
        job_id = secrets.token_urlsafe(16)
        if not job_id.startswith("-"):
            return job_id


def is_job_id(value: object) -> bool:
    """True if ``value`` has the shape of a job id (it may still be unknown)."""
    return isinstance(value, str) and _JOB_ID.fullmatch(value) is not None


def is_target_index(value: object) -> bool:
    """True if ``value`` can be a target's index: an int from 0 up to what every store's
    column holds (a bool is not one)."""
    return type(value) is int and 0 <= value <= _MAX_TARGET_INDEX


_MAX_TARGET_INDEX = 2**31 - 1  # PostgreSQL's integer column


# --------------------------------------------------------------------------------------------
# Statuses


class JobState(StrEnum):
    """A job's status. Values compare equal to their plain strings (``JobState.DONE == "done"``)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    PARTIAL = "partial"
    CANCELLED = "cancelled"

    @property
    def is_live(self) -> bool:
        """True for ``queued`` and ``running``: the job still counts against the caps."""
        # Identity against module globals: checked several times per stored outcome, and an
        # enum's class attribute lookup and its Python-level __hash__ cost more than the rest.
        return self is _QUEUED or self is _RUNNING


_QUEUED = JobState.QUEUED
_RUNNING = JobState.RUNNING


class TargetState(StrEnum):
    """A target's status: ``pending``, ``running``, ``done`` or ``failed``."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


# --------------------------------------------------------------------------------------------
# Results and statuses


#: What the results' encoder makes of a str (its own call for one, without the method around it).
_encode_str = json.encoder.encode_basestring
#: The text of ``Result("")``.
_EMPTY_RESULT_TEXT = '{"content":"","meta":{}}'


@dataclass(frozen=True, slots=True)
class Result:
    """What a fetch function returns for one target: the content and free-form metadata.

    ``meta`` must be JSON-serialisable (no NaN, sets or cycles) and nest at most 255 levels
    deep; a result that is not fails its target with a clear error instead of being stored.
    """

    content: str
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json_text(self) -> str:
        """Encode as ``{"content": ..., "meta": ...}``; raises ValueError if that is not JSON."""
        content, meta = self.content, self.meta
        if type(content) is str and not content and type(meta) is dict and not meta:
            return _EMPTY_RESULT_TEXT  # an empty result (a no-op fetch's): its text, as is
        if not isinstance(content, str):
            raise ValueError(f"Result.content must be a str, not {type(content).__name__}")
        if not isinstance(meta, dict):
            raise ValueError(f"Result.meta must be a dict, not {type(meta).__name__}")
        try:
            # In parts, to the whole object's text: a str goes straight to the C string encoder,
            # an empty meta costs nothing (the whole object set up the full encoder each time).
            meta_text = "{}" if type(meta) is dict and not meta else compact_json(meta)
            if nested_deeper_than(meta_text, MAX_DEPTH - 1):  # meta is one level in
                raise ValueError(f"Result.meta nests more than {MAX_DEPTH - 1} levels deep")
            text = '{"content":' + _encode_str(content) + ',"meta":' + meta_text + "}"
            text.encode("utf-8")
        except Exception as exc:  # whatever a hostile dict subclass or __str__ may raise
            raise ValueError(f"{type(exc).__name__}: {safe_text(exc)}") from None
        return text

    @classmethod
    def from_json_text(cls, text: str) -> Result:
        """Decode what :meth:`to_json_text` wrote."""
        obj = json.loads(text)
        return cls(content=obj["content"], meta=obj["meta"])


@dataclass(frozen=True, slots=True)
class Job:
    """A job as stored. Times are Unix epoch seconds (``time.time()`` values).

    ``targets_done`` counts every stored outcome, **failed ones included**; ``targets_failed``
    the failed ones among them. :attr:`targets_succeeded` and :attr:`targets_unfinished` give
    the other two counts.
    """

    id: str
    status: JobState
    error: str | None
    targets_total: int
    targets_done: int
    targets_failed: int = 0
    caller: str = ""
    caller_class: str = ""
    idem_key: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    expires_at: float = 0.0
    #: The caller's labels (see :func:`check_metadata`); never changes once stored. Left out
    #: of the hash (a dict has none); compared.
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: The job this one retries (see :meth:`trio_batch.Runner.retry`), or None.
    parent_id: str | None = None

    @property
    def is_terminal(self) -> bool:
        """True once the job is ``done``, ``failed``, ``partial`` or ``cancelled``."""
        return not self.status.is_live

    @property
    def targets_succeeded(self) -> int:
        """Targets stored as ``done``: ``targets_done`` less the failed ones."""
        return self.targets_done - self.targets_failed

    @property
    def targets_unfinished(self) -> int:
        """Targets with no stored outcome (pending, or the one being fetched)."""
        return self.targets_total - self.targets_done

    def to_json(self) -> dict[str, Any]:
        """The job as a JSON object (statuses as plain strings), its fields in their order."""
        # Spelled out: dataclasses.asdict deep-copies field by field, 24 us a job, 2.5 ms of
        # the loop for a page of 100 jobs.
        return {
            "id": self.id,
            "status": str(self.status),
            "error": self.error,
            "targets_total": self.targets_total,
            "targets_done": self.targets_done,
            "targets_failed": self.targets_failed,
            "caller": self.caller,
            "caller_class": self.caller_class,
            "idem_key": self.idem_key,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expires_at": self.expires_at,
            "metadata": dict(self.metadata),
            "parent_id": self.parent_id,
        }


@dataclass(frozen=True, slots=True)
class TargetStatus:
    """One target of a job as stored: its position, URL, status and outcome.

    ``attempts`` is how many attempts the stored outcome took (more than 1 after retries), 0
    while the target has no outcome.
    """

    idx: int
    url: str
    status: TargetState
    result: Result | None
    error: str | None
    hint: str | None
    options: Options = DEFAULT_OPTIONS
    finished_at: float | None = None
    attempts: int = 0
    custom_id: str | None = None
    #: Characters of the stored result when a read left it unread, being larger than it asked
    #: for (see :meth:`Runner.watch <trio_batch.Runner.watch>`'s ``results_up_to``); then
    #: ``result`` is None. None when ``result`` holds the result, or there is none.
    result_size: int | None = None

    @property
    def is_finished(self) -> bool:
        """True once the target has a stored outcome (``done`` or ``failed``)."""
        return self.status in (TargetState.DONE, TargetState.FAILED)

    def to_json(self) -> dict[str, Any]:
        """The target's status as a JSON object."""
        return {
            "idx": self.idx,
            "custom_id": self.custom_id,
            "url": self.url,
            "options": self.options.to_json(),
            "status": str(self.status),
            "result": None
            if self.result is None
            else {"content": self.result.content, "meta": self.result.meta},
            "error": self.error,
            "hint": self.hint,
            "finished_at": self.finished_at,
            "attempts": self.attempts,
        }


@dataclass(frozen=True, slots=True)
class OutcomeWrite:
    """One target's outcome, as the runner hands it to a store: a result or an error.

    Exactly one of ``result`` and ``error`` is set; ``hint`` goes with an error. ``attempts``
    is how many attempts at the target this outcome took (see :class:`~trio_batch.RetryPolicy`).
    ``max_result_size`` caps the result's stored JSON (characters); past it the store keeps
    the outcome as a :class:`~trio_batch.ResultTooLarge` failure instead.
    """

    job_id: str
    idx: int
    result: Result | None = None
    error: str | None = None
    hint: str | None = None
    attempts: int = 1
    max_result_size: int | None = None


# --------------------------------------------------------------------------------------------
# Rules every backend shares


def final_status(targets_total: int, targets_failed: int) -> JobState:
    """The terminal status of a job whose every target has an outcome.

    ``done`` if none failed, ``failed`` if all failed, ``partial`` otherwise.
    """
    if targets_failed == 0:
        return JobState.DONE
    if targets_failed >= targets_total:
        return JobState.FAILED
    return JobState.PARTIAL


def with_running(
    job: Job, targets: list[TargetStatus], in_flight: int | None = None
) -> list[TargetStatus]:
    """``targets`` with the one being fetched shown as ``running``; changes ``targets`` in place.

    Stores keep ``pending``, ``done`` and ``failed`` only: a write per target start would cost
    a commit, and a restart could leave a target stuck as ``running``. A ``running`` job's
    targets are drained strictly in order, so the one due next (``idx == targets_done``) is
    the one in flight. ``in_flight`` names it where only the runner knows (the last fetch of a
    job cancelled meanwhile). ``targets`` may be a run of consecutive targets (one target
    alone, say), not only all of them. Returns ``targets``.
    """
    idx = in_flight
    if idx is None and job.status is JobState.RUNNING:
        idx = job.targets_done
    if idx is not None and targets:
        pos = idx - targets[0].idx
        if 0 <= pos < len(targets):  # at most one target reads as running
            target = targets[pos]
            if target.status is TargetState.PENDING:
                targets[pos] = dataclasses.replace(target, status=TargetState.RUNNING)
    return targets
