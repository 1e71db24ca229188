"""The value types shared by the store, the runner and the front ends.

Everything here is plain data: frozen dataclasses, string enums and exceptions. Nothing in this
module touches SQLite or trio.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

__all__ = [
    "BatchError",
    "Busy",
    "CallerBusy",
    "ClassLimits",
    "Config",
    "InvalidRequest",
    "InvalidTargets",
    "Job",
    "JobState",
    "Options",
    "Result",
    "RunnerClosed",
    "SchemaVersionError",
    "StoreError",
    "StoreLocked",
    "StoreUnavailable",
    "Target",
    "TargetState",
    "TargetStatus",
    "TooManyTargets",
    "idem_key",
]

#: Longest URL a target may carry; far past any real URL, short enough to keep rows small.
MAX_URL_LENGTH = 8192
#: Longest option string (a grep pattern, a jq program, a question).
MAX_OPTION_LENGTH = 8192
#: Longest caller or caller-class name.
MAX_CALLER_LENGTH = 256
#: Longest error or hint text stored for a target.
MAX_ERROR_LENGTH = 4096


# --------------------------------------------------------------------------------------------
# Errors


class BatchError(Exception):
    """Base of every error trio_batch raises on purpose.

    The HTTP service answers each with the status, kind and title that its problem table
    (``PROBLEMS`` in ``trio_batch/http/_problems.py``) gives the class or its nearest listed
    base; the "HTTP nnn" in the docstrings here says which status that is.
    """


class InvalidRequest(BatchError):
    """An argument is malformed (a caller name that is not a non-empty string, say). HTTP 422."""


class InvalidTargets(InvalidRequest):
    """The target list is malformed: empty, a non-target, a repeated target or a bad JSON shape.

    ``index`` is the position of the offending target in the submitted list, when there is one.
    HTTP 422.
    """

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class TooManyTargets(BatchError):
    """The job has more targets than the ``targets_per_job`` cap allows. HTTP 422."""


class CallerBusy(BatchError):
    """The caller already has ``jobs_per_caller`` live jobs. HTTP 429: retry once one ends."""


class Busy(BatchError):
    """All ``jobs_total`` job slots are taken by live jobs. HTTP 429: retry once one ends."""


class RunnerClosed(BatchError):
    """The runner has shut down (or is shutting down): it takes no new jobs, and once it has
    stopped it answers nothing more. HTTP 503."""


class StoreError(BatchError):
    """The database cannot be used as asked. HTTP 503."""


class SchemaVersionError(StoreError):
    """The database was written by a newer version of trio_batch (or is not ours at all)."""


class StoreLocked(StoreError):
    """Another runner (in this process or another) is already running on this database.

    Only one runner may drain a database at a time: a second one would reap the first one's
    live jobs as "restart". Read-only use of the store is unaffected.
    """


class StoreUnavailable(StoreError):
    """The database refused a read or write: locked past the busy timeout, full, or an I/O error.

    Nothing was changed by the call that raised it. It may succeed if retried later.
    """


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
        return self in (JobState.QUEUED, JobState.RUNNING)


class TargetState(StrEnum):
    """A target's status: ``pending``, ``running``, ``done`` or ``failed``."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


# --------------------------------------------------------------------------------------------
# Targets


def _check_text(value: object, what: str, max_length: int, *, index: int | None) -> str:
    """Return ``value`` if it is a string SQLite and JSON can store, else raise InvalidTargets."""
    if not isinstance(value, str):
        raise InvalidTargets(f"{what} must be a string, not {type(value).__name__}", index=index)
    if len(value) > max_length:
        raise InvalidTargets(
            f"{what} is {len(value)} characters long; the limit is {max_length}", index=index
        )
    if "\x00" in value:
        raise InvalidTargets(f"{what} contains a NUL character", index=index)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidTargets(
            f"{what} is not valid Unicode (it contains a lone surrogate)", index=index
        ) from None
    return value


@dataclass(frozen=True, slots=True)
class Options:
    """How to fetch a target. Empty strings and ``False`` mean "not set".

    The meaning of each field belongs to the fetch function; the runner only stores them.
    """

    mode: str = ""
    question: str = ""
    pages: str = ""
    grep: str = ""
    jq: str = ""
    context: bool = False
    recover: bool = False

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "bool":
                if not isinstance(value, bool):
                    raise InvalidTargets(
                        f"option {f.name!r} must be true or false, not {type(value).__name__}"
                    )
            else:
                _check_text(value, f"option {f.name!r}", MAX_OPTION_LENGTH, index=None)

    @classmethod
    def from_json(cls, obj: object) -> Options:
        """Build options from a decoded JSON object, strictly.

        Raises :class:`InvalidTargets` for a non-object, an unknown key or a wrongly typed value.
        """
        if not isinstance(obj, Mapping):
            raise InvalidTargets(f"options must be a JSON object, not {_json_type(obj)}")
        known = [name for name, _ in _OPTION_DEFAULTS]
        unknown = unknown_keys(obj, known)
        if unknown:
            raise InvalidTargets(
                f"unknown option(s) {unknown}; known options are {', '.join(known)}"
            )
        return cls(**obj)

    def to_json(self) -> dict[str, Any]:
        """The options as a JSON object, with every empty or default field left out."""
        out = {}
        for name, default in _OPTION_DEFAULTS:
            value = getattr(self, name)
            if value != default:
                out[name] = value
        return out


_OPTION_DEFAULTS = tuple((f.name, f.default) for f in dataclasses.fields(Options))


@dataclass(frozen=True, slots=True)
class Target:
    """One unit of work: a URL and the options to fetch it with.

    Constructing a target validates it: ``url`` must be a non-empty string of at most
    ``MAX_URL_LENGTH`` characters, without NUL characters or lone surrogates. A bad value raises
    :class:`InvalidTargets`. The URL scheme is left to the fetch function.
    """

    url: str
    options: Options = Options()

    def __post_init__(self) -> None:
        _check_text(self.url, "url", MAX_URL_LENGTH, index=None)
        if not self.url.strip():
            raise InvalidTargets("url must not be empty")
        if not isinstance(self.options, Options):
            raise InvalidTargets(
                f"options must be an Options instance, not {type(self.options).__name__}"
            )

    @classmethod
    def from_json(cls, obj: object) -> Target:
        """Build a target from a decoded JSON object ``{"url": ..., "options": {...}}``.

        Strict: a non-object, a missing or non-string ``url``, an unknown key or a wrongly
        typed option raises :class:`InvalidTargets`.
        """
        if not isinstance(obj, Mapping):
            raise InvalidTargets(f"a target must be a JSON object, not {_json_type(obj)}")
        unknown = unknown_keys(obj, ("url", "options"))
        if unknown:
            raise InvalidTargets(
                f"unknown target key(s) {unknown}; a target has 'url' and optionally 'options'"
            )
        if "url" not in obj:
            raise InvalidTargets("a target needs a 'url'")
        url = obj["url"]
        if not isinstance(url, str):
            raise InvalidTargets(f"url must be a string, not {_json_type(url)}")
        options = Options.from_json(obj["options"]) if "options" in obj else Options()
        return cls(url, options)

    def to_json(self) -> dict[str, Any]:
        """The target as a JSON object; ``options`` is left out when every option is unset."""
        out: dict[str, Any] = {"url": self.url}
        options = self.options.to_json()
        if options:
            out["options"] = options
        return out


def unknown_keys(obj: Mapping[Any, Any], known: Sequence[str]) -> str:
    """The keys of ``obj`` outside ``known``, sorted and quoted for a message; "" if none."""
    return ", ".join(repr(k) for k in sorted(map(str, obj)) if k not in known)


def safe_text(value: object, limit: int = MAX_ERROR_LENGTH) -> str:
    """Render ``value`` as storable text: never raises, no lone surrogates, bounded length."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # a hostile __str__ must not take the runner down
        text = f"<unprintable {type(value).__name__}>"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_type(obj: object) -> str:
    """Name ``obj``'s type the way a JSON author would."""
    if obj is None:
        return "null"
    if isinstance(obj, bool):
        return "a boolean"
    if isinstance(obj, int | float):
        return "a number"
    if isinstance(obj, str):
        return "a string"
    if isinstance(obj, Mapping):
        return "an object"
    if isinstance(obj, list | tuple):
        return "an array"
    return type(obj).__name__


def check_targets(targets: object) -> tuple[Target, ...]:
    """Return ``targets`` as a tuple if it is a non-empty sequence of distinct targets.

    Raises :class:`InvalidTargets` naming the first offending position otherwise.
    """
    if isinstance(targets, str | bytes) or not isinstance(targets, Sequence):
        raise InvalidTargets(f"targets must be a list of Target, not {type(targets).__name__}")
    if not targets:
        raise InvalidTargets("a job needs at least one target")
    seen: dict[Target, int] = {}
    for i, target in enumerate(targets):
        if not isinstance(target, Target):
            raise InvalidTargets(f"target {i} is a {type(target).__name__}, not a Target", index=i)
        first = seen.setdefault(target, i)
        if first != i:
            raise InvalidTargets(f"target {i} repeats target {first} ({target.url})", index=i)
    return tuple(targets)


def check_caller(value: object, what: str = "caller") -> str:
    """Return ``value`` if it is a usable caller (or caller-class) name.

    Raises :class:`InvalidRequest` for a non-string, an empty or over-long name, a NUL or a lone
    surrogate.
    """
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{what} must be a non-empty string")
    try:
        _check_text(value, what, MAX_CALLER_LENGTH, index=None)
    except InvalidTargets as exc:
        raise InvalidRequest(str(exc)) from None
    return value


def idem_key(caller: str, targets: Sequence[Target]) -> str:
    """The idempotency key of ``targets`` submitted by ``caller``.

    Hex SHA-256 of ``caller + "\\x00" + canonical(targets)``, where canonical is compact JSON of
    ``[t.to_json() for t in targets]`` with sorted keys: field order, whitespace and options
    spelled out at their defaults do not change the key; any change of a URL, an option, the
    order of the targets or the caller does.
    """
    canonical = json.dumps(
        [t.to_json() for t in targets], sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    return hashlib.sha256(f"{caller}\x00{canonical}".encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# Results and statuses


@dataclass(frozen=True, slots=True)
class Result:
    """What a fetch function returns for one target: the content and free-form metadata.

    ``meta`` must be JSON-serialisable (no NaN, sets or cycles); a result that is not fails its
    target with a clear error instead of being stored.
    """

    content: str
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json_text(self) -> str:
        """Encode as ``{"content": ..., "meta": ...}``; raises ValueError if that is not JSON."""
        if not isinstance(self.content, str):
            raise ValueError(f"Result.content must be a str, not {type(self.content).__name__}")
        if not isinstance(self.meta, dict):
            raise ValueError(f"Result.meta must be a dict, not {type(self.meta).__name__}")
        try:
            text = json.dumps(
                {"content": self.content, "meta": self.meta},
                allow_nan=False,
                ensure_ascii=False,
                separators=(",", ":"),
            )
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

    ``targets_done`` counts stored outcomes, failed ones included; ``targets_failed`` the failed
    ones among them.
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

    @property
    def is_terminal(self) -> bool:
        """True once the job is ``done``, ``failed``, ``partial`` or ``cancelled``."""
        return not self.status.is_live

    def to_json(self) -> dict[str, Any]:
        """The job as a JSON object (statuses as plain strings)."""
        out = dataclasses.asdict(self)
        out["status"] = str(self.status)
        return out


@dataclass(frozen=True, slots=True)
class TargetStatus:
    """One target of a job as stored: its position, URL, status and outcome."""

    idx: int
    url: str
    status: TargetState
    result: Result | None
    error: str | None
    hint: str | None
    options: Options = Options()
    finished_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The target's status as a JSON object."""
        return {
            "idx": self.idx,
            "url": self.url,
            "options": self.options.to_json(),
            "status": str(self.status),
            "result": None
            if self.result is None
            else {"content": self.result.content, "meta": self.result.meta},
            "error": self.error,
            "hint": self.hint,
            "finished_at": self.finished_at,
        }


# --------------------------------------------------------------------------------------------
# Configuration


def _check_number(owner: str, name: str, value: object, *, integer: bool) -> None:
    kind = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(
            f"{owner}.{name} must be {'an integer' if integer else 'a number'}, "
            f"not {type(value).__name__}"
        )
    assert isinstance(value, int | float)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{owner}.{name} must be finite, not {value}")
    if value < 0:
        raise ValueError(f"{owner}.{name} must not be negative (got {value})")


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

    A number given as 0 takes its default; a negative one raises ValueError.

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

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
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

    def limits_for(self, caller_class: str) -> tuple[int, int]:
        """``(targets_per_job, jobs_per_caller)`` for a caller of ``caller_class``."""
        limits = self.class_limits.get(caller_class)
        if limits is None:
            return self.targets_per_job, self.jobs_per_caller
        return (
            self.targets_per_job if limits.targets_per_job is None else limits.targets_per_job,
            self.jobs_per_caller if limits.jobs_per_caller is None else limits.jobs_per_caller,
        )
