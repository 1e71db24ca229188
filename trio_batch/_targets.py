"""What a caller submits, and its checks: :class:`Options`, :class:`Target`, job metadata,
caller names and the idempotency key.

Plain data and pure functions, as in :mod:`._model` (which answers with these values): every
check raises a typed error (:class:`~trio_batch.InvalidTargets`,
:class:`~trio_batch.InvalidRequest`) before anything is stored.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any

from ._errors import InvalidRequest, InvalidTargets
from ._event import MAX_WEBHOOK_URL_LENGTH
from ._text import CONTROL_CHARACTER, json_type, safe_text, unknown_keys

__all__ = [
    "DEFAULT_OPTIONS",
    "MAX_CALLER_LENGTH",
    "MAX_CUSTOM_ID_LENGTH",
    "MAX_METADATA_KEYS",
    "MAX_METADATA_KEY_LENGTH",
    "MAX_METADATA_VALUE_LENGTH",
    "MAX_OPTION_LENGTH",
    "MAX_URL_LENGTH",
    "Options",
    "Target",
    "check_caller",
    "check_metadata",
    "check_targets",
    "check_webhook_text",
    "idem_key",
    "is_caller",
    "plain_urls",
]

#: Longest URL a target may carry; far past any real URL, short enough to keep rows small.
MAX_URL_LENGTH = 8192
#: Longest option string (a grep pattern, a jq program, a question).
MAX_OPTION_LENGTH = 8192
#: Longest caller or caller-class name.
MAX_CALLER_LENGTH = 256
#: Longest custom id of a target.
MAX_CUSTOM_ID_LENGTH = 64
#: Most metadata keys a job may carry, the longest key and the longest value.
MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_LENGTH = 64
MAX_METADATA_VALUE_LENGTH = 512
#: A metadata key: what a label filter ``key:value`` can name (no ``:``, no spaces).
_METADATA_KEY = re.compile(r"[A-Za-z0-9_.\-/]{1,64}", re.ASCII)


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
    #: Keep the raw response (status, headers, body) in the job's snapshot.
    snapshot: bool = False
    #: A job id: take the response from that job's snapshot instead of the network.
    replay: str = ""
    #: With ``replay``: what a target missing from the snapshot does, ``fail`` (the default)
    #: or ``fetch``.
    on_miss: str = ""
    #: With ``replay``: fetch again with the snapshot's validators; a 304 reuses its bytes.
    revalidate: bool = False

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
            raise InvalidTargets(f"options must be a JSON object, not {json_type(obj)}")
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

#: Every option unset: the options of a target made without any (shared, it is immutable).
DEFAULT_OPTIONS = Options()


@dataclass(frozen=True, slots=True, init=False)
class Target:
    """One unit of work: a URL, the options to fetch it with, and optionally the caller's id.

    Constructing a target validates it: ``url`` must be a non-empty string of at most
    ``MAX_URL_LENGTH`` characters, without control characters (C0, C1, DEL, bidirectional
    overrides and marks) or lone surrogates. ``custom_id``, if set, is the caller's own name
    for the target (1 to ``MAX_CUSTOM_ID_LENGTH`` characters, same rules, unique within its
    job): it comes back in status, export and retries. A bad value raises
    :class:`InvalidTargets`. The URL scheme is left to the fetch function.
    """

    url: str
    options: Options = DEFAULT_OPTIONS
    custom_id: str | None = None

    def __init__(
        self, url: str, options: Options = DEFAULT_OPTIONS, custom_id: str | None = None
    ) -> None:
        # Every job's targets are made afresh: the usual target passes one search and its
        # slots are set directly (the frozen __init__ calls object.__setattr__ per field).
        # Anything the fast checks doubt takes the full ones, which say what is wrong.
        if (
            type(url) is not str
            or len(url) > MAX_URL_LENGTH
            or _UNFIT_URL.search(url) is not None
            or not url.strip()
        ):
            _check_url(url)
        if options is not DEFAULT_OPTIONS and not isinstance(options, Options):
            raise InvalidTargets(
                f"options must be an Options instance, not {type(options).__name__}"
            )
        if custom_id is not None and (
            type(custom_id) is not str
            or not 0 < len(custom_id) <= MAX_CUSTOM_ID_LENGTH
            or _UNFIT_ID.search(custom_id) is not None
        ):
            _check_custom_id(custom_id)
        _set_target_url(self, url)
        _set_target_options(self, options)
        _set_target_custom_id(self, custom_id)

    @classmethod
    def from_json(cls, obj: object) -> Target:
        """Build a target from a decoded JSON object
        ``{"url": ..., "options": {...}, "custom_id": ...}``.

        Strict: a non-object, a missing or non-string ``url``, an unknown key, a wrongly
        typed option or a bad ``custom_id`` raises :class:`InvalidTargets`.
        """
        if not isinstance(obj, Mapping):
            raise InvalidTargets(f"a target must be a JSON object, not {json_type(obj)}")
        unknown = unknown_keys(obj, ("url", "options", "custom_id"))
        if unknown:
            raise InvalidTargets(
                f"unknown target key(s) {unknown}; a target has 'url' and optionally "
                "'options' and 'custom_id'"
            )
        if "url" not in obj:
            raise InvalidTargets("a target needs a 'url'")
        url = obj["url"]
        if not isinstance(url, str):
            raise InvalidTargets(f"url must be a string, not {json_type(url)}")
        options = Options.from_json(obj["options"]) if "options" in obj else DEFAULT_OPTIONS
        custom_id = obj.get("custom_id")
        if custom_id is not None and not isinstance(custom_id, str):
            raise InvalidTargets(f"custom_id must be a string, not {json_type(custom_id)}")
        return cls(url, options, custom_id)

    def to_json(self) -> dict[str, Any]:
        """The target as a JSON object; ``options`` is left out when every option is unset,
        ``custom_id`` when there is none."""
        out: dict[str, Any] = {"url": self.url}
        options = self.options.to_json()
        if options:
            out["options"] = options
        if self.custom_id is not None:
            out["custom_id"] = self.custom_id
        return out


_set_target_url, _set_target_options, _set_target_custom_id = (
    Target.__dict__[f.name].__set__ for f in dataclasses.fields(Target)
)
#: What no URL may hold, in one search: CONTROL_CHARACTER's class (NUL is one) and lone
#: surrogates.
_UNFIT_URL = re.compile(CONTROL_CHARACTER.pattern.removesuffix("]") + "\ud800-\udfff]")
#: What no custom id may hold: NUL and lone surrogates.
_UNFIT_ID = re.compile("[\x00\ud800-\udfff]")


def _check_url(url: object) -> None:
    """Raise the :class:`InvalidTargets` that says what is wrong with ``url``, if anything."""
    url = _check_text(url, "url", MAX_URL_LENGTH, index=None)
    if not url.strip():
        raise InvalidTargets("url must not be empty")
    control = CONTROL_CHARACTER.search(url)
    if control is not None:
        # A URL has no use for them, and printed they steer the operator's terminal.
        raise InvalidTargets(
            f"url contains the control character U+{ord(control.group()):04X} at position "
            f"{control.start()}; percent-encode it if it is meant"
        )


def check_webhook_text(url: object) -> str:
    """Return ``url`` if it is text a webhook URL can be, in every store: a non-empty string
    of at most ``MAX_WEBHOOK_URL_LENGTH`` characters without control or bidi characters (NUL
    is one) or lone surrogates. Raises :class:`InvalidRequest` otherwise. Whether it is a URL
    the sender can deliver to is the webhook sender's to say."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidRequest("the webhook's 'url' must be a non-empty string")
    if len(url) > MAX_WEBHOOK_URL_LENGTH:
        raise InvalidRequest(
            f"the webhook URL is {len(url)} characters; at most {MAX_WEBHOOK_URL_LENGTH}"
        )
    unfit = _UNFIT_URL.search(url)
    if unfit is not None:  # CR/LF would split a header, ESC steer a terminal, NUL the store
        raise InvalidRequest(
            f"the webhook URL contains the character U+{ord(unfit.group()):04X} at "
            f"position {unfit.start()}; percent-encode it if it is meant"
        )
    return url


def _check_custom_id(custom_id: object) -> None:
    """Raise the :class:`InvalidTargets` that says what is wrong with ``custom_id``."""
    _check_text(custom_id, "custom_id", MAX_CUSTOM_ID_LENGTH, index=None)
    if not custom_id:
        raise InvalidTargets("custom_id must not be empty")


class _CheckedTargets(tuple[Target, ...]):
    """Targets :func:`check_targets` has passed. A tuple of frozen targets cannot change, so
    it is not checked again (the runner checks a job's targets, then hands them to the store,
    which checks what other callers hand it), and its canonical JSON, made by the check, is
    what :func:`idem_key` hashes."""

    canonical: str
    #: No target has options or a custom id (see :func:`plain_urls`).
    plain: bool
    #: The last key :func:`idem_key` made of these targets, with the rest of what it hashed
    #: (the caller; the metadata and parent's text, or None): a submit's key is asked for by
    #: the runner, then by the store's create, and the second is answered from here.
    keyed: tuple[str, str | None, str] | None = None


def check_targets(targets: object) -> tuple[Target, ...]:
    """Return ``targets`` as a tuple if it is a non-empty sequence of distinct targets.

    Raises :class:`InvalidTargets` naming the first offending position otherwise.
    """
    if type(targets) is _CheckedTargets:
        return targets
    if isinstance(targets, str | bytes) or not isinstance(targets, Sequence):
        raise InvalidTargets(f"targets must be a list of Target, not {type(targets).__name__}")
    # Read once: what is checked, and noted below, is what is returned, even if the sequence
    # changes under us (a list another thread mutates, a lazy view).
    checked = _CheckedTargets(targets)
    if not checked:
        raise InvalidTargets("a job needs at least one target")
    # Keyed by each target's canonical JSON, equal exactly when the targets are equal: the
    # key's text is made once, and a str hashes once where a Target hashed its fields.
    seen: dict[str, int] = {}
    custom_ids: dict[str, int] = {}
    plain = True
    for i, target in enumerate(checked):
        if not isinstance(target, Target):
            raise InvalidTargets(f"target {i} is a {type(target).__name__}, not a Target", index=i)
        if target.options is DEFAULT_OPTIONS and target.custom_id is None:
            part = '{"url":' + encode_basestring_ascii(target.url) + "}"  # as _canonical_target
        else:
            part = _canonical_target(target)
            plain = False
        first = seen.setdefault(part, i)
        if first != i:
            raise InvalidTargets(f"target {i} repeats target {first} ({target.url})", index=i)
        if target.custom_id is not None:
            first = custom_ids.setdefault(target.custom_id, i)
            if first != i:
                raise InvalidTargets(
                    f"target {i} repeats the custom_id {target.custom_id!r} of target {first}",
                    index=i,
                )
    checked.canonical = "[" + ",".join(seen) + "]"  # in order: no target repeats
    checked.plain = plain
    return checked


def plain_urls(targets: Sequence[Target]) -> list[str] | None:
    """The URLs of ``targets`` in order if none has options or a custom id (they are then
    their URLs alone), else None."""
    if type(targets) is _CheckedTargets:
        plain = targets.plain
    else:
        plain = all(t.options is DEFAULT_OPTIONS and t.custom_id is None for t in targets)
    return [t.url for t in targets] if plain else None


def check_metadata(obj: object) -> dict[str, str]:
    """Return ``obj`` as a job's metadata if it is one: a mapping of at most
    ``MAX_METADATA_KEYS`` keys (letters, digits, ``_.-/``, at most
    ``MAX_METADATA_KEY_LENGTH`` characters) to strings of at most
    ``MAX_METADATA_VALUE_LENGTH`` characters (no NUL, no lone surrogate).

    Raises :class:`InvalidRequest` naming what is wrong otherwise.
    """
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise InvalidRequest(f"metadata must be a JSON object of strings, not {json_type(obj)}")
    if len(obj) > MAX_METADATA_KEYS:
        raise InvalidRequest(f"metadata has {len(obj)} keys; the limit is {MAX_METADATA_KEYS}")
    out: dict[str, str] = {}
    for key, value in obj.items():
        if not isinstance(key, str) or _METADATA_KEY.fullmatch(key) is None:
            raise InvalidRequest(
                f"metadata key {safe_text(key, 80)!r} must be 1 to {MAX_METADATA_KEY_LENGTH} "
                "letters, digits or '_.-/'"
            )
        if not isinstance(value, str):
            raise InvalidRequest(
                f"metadata value of {key!r} must be a string, not {json_type(value)}"
            )
        try:
            _check_text(value, f"metadata value of {key!r}", MAX_METADATA_VALUE_LENGTH, index=None)
        except InvalidTargets as exc:
            raise InvalidRequest(str(exc)) from None
        out[key] = value
    return out


def check_caller(value: object, what: str = "caller") -> str:
    """Return ``value`` if it is a usable caller (or caller-class) name.

    Raises :class:`InvalidRequest` for a non-string, an empty or over-long name, a control
    character (see :data:`~trio_batch._text.CONTROL_CHARACTER`) or a lone surrogate.
    """
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{what} must be a non-empty string")
    try:
        _check_text(value, what, MAX_CALLER_LENGTH, index=None)
    except InvalidTargets as exc:
        raise InvalidRequest(str(exc)) from None
    control = CONTROL_CHARACTER.search(value)
    if control is not None:  # printed in job listings: it must not steer a terminal
        raise InvalidRequest(f"{what} contains the control character U+{ord(control.group()):04X}")
    return value


def is_caller(value: object) -> bool:
    """True if ``value`` passes :func:`check_caller`: a name some job may have. A read that
    filters on a caller answers anything else as it does an unknown caller, on every backend
    (a NUL or a lone surrogate would otherwise reach the database, which refuses them)."""
    try:
        check_caller(value)
    except InvalidRequest:
        return False
    return True


def idem_key(
    caller: str,
    targets: Sequence[Target],
    metadata: Mapping[str, str] | None = None,
    parent_id: str | None = None,
) -> str:
    """The idempotency key of ``targets`` submitted by ``caller``.

    Hex SHA-256 of ``caller + "\\x00" + canonical(targets)``, where canonical is compact JSON of
    ``[t.to_json() for t in targets]`` with sorted keys: field order, whitespace and options
    spelled out at their defaults do not change the key; any change of a URL, an option, a
    custom id, the order of the targets or the caller does. Metadata and a parent (a retry)
    are part of the request too: when either is set, ``"\\x00" + canonical(metadata) +
    "\\x00" + parent_id`` follows, so the same targets with other metadata make another job
    (whose metadata is not silently dropped), and a retry is never the job of a plain submit.
    Without them the key is what it was before they existed.
    """
    extra = None
    if metadata or parent_id is not None:
        extra = f"{_CANONICAL_ENCODER.encode(dict(metadata or {}))}\x00{parent_id or ''}"
    if type(targets) is not _CheckedTargets:
        return _hashed(caller, "[" + ",".join(map(_canonical_target, targets)) + "]", extra)
    keyed = targets.keyed
    # A plain str caller only: a subclass's __eq__ could claim to be the caller it is not.
    if type(caller) is not str:
        return _hashed(caller, targets.canonical, extra)
    if keyed is not None and keyed[0] == caller and keyed[1] == extra:
        return keyed[2]
    key = _hashed(caller, targets.canonical, extra)
    targets.keyed = (caller, extra, key)
    return key


def _hashed(caller: str, canonical: str, extra: str | None) -> str:
    text = f"{caller}\x00{canonical}" if extra is None else f"{caller}\x00{canonical}\x00{extra}"
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical_target(target: Target) -> str:
    """``target.to_json()`` as compact JSON with sorted keys, ASCII only."""
    # Byte for byte what json.dumps writes, without a dict per target: sorted keys,
    # "custom_id" < "options" < "url".
    url = encode_basestring_ascii(target.url)
    custom = (
        ""
        if target.custom_id is None
        else f'"custom_id":{encode_basestring_ascii(target.custom_id)},'
    )
    options = "{}" if target.options is DEFAULT_OPTIONS else _canonical(target.options)
    if options == "{}":
        return f'{{{custom}"url":{url}}}'
    return f'{{{custom}"options":{options},"url":{url}}}'


#: The canonical JSON of idempotency keys: compact, sorted keys, ASCII only.
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@functools.lru_cache(maxsize=1024)
def _canonical(options: Options) -> str:
    # Most targets share a handful of option sets; equal options have equal JSON.
    return _CANONICAL_ENCODER.encode(options.to_json())
