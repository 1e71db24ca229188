"""Decoding JSON sent by users (request bodies, batch files): strict, with errors a person can
act on.

Python's decoder accepts ``NaN`` and ``Infinity`` (not JSON), reads ``1e400`` as infinity,
and fails on an integer of more than 4300 digits with a message telling the reader to call
``sys.set_int_max_str_digits()``, advice meant for the service's programmer, not its caller.
It also lets a repeated key pass silently (the last one wins, so ``{"url": a, "url": b}``
fetches b) and raises RecursionError on a deeply nested document. :data:`STRICT_JSON`
refuses all of these with plain messages, as ``json.JSONDecodeError`` (a ValueError) carrying
the position.

:func:`compact_json` encodes a stored value (a result's ``meta``) with a C encoder made once
per thread: ``JSONEncoder.encode`` builds one per call.
"""

from __future__ import annotations

import itertools
import json
import math

__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "STRICT_JSON", "compact_json", "nested_deeper_than"]

#: Most digits an integer in user JSON may have (Python's own conversion limit).
MAX_INT_DIGITS = 4300


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"a number of {digits} digits; at most {MAX_INT_DIGITS} are accepted")
    return int(text)


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key!r} appears twice in one object")
            seen.add(key)
    return obj


class _StrictDecoder(json.JSONDecoder):
    """Turns a refusal inside a hook into a JSONDecodeError with the document's position."""

    def raw_decode(self, s: str, idx: int = 0) -> tuple[object, int]:
        try:
            return super().raw_decode(s, idx)
        except json.JSONDecodeError:
            raise
        except ValueError as exc:  # from a hook: no position of its own
            raise json.JSONDecodeError(str(exc), s, idx) from None
        except RecursionError:
            raise json.JSONDecodeError("nested too deeply", s, idx) from None


#: The decoder for JSON from users: ``STRICT_JSON.decode(text)`` or ``.raw_decode(text, pos)``.
STRICT_JSON = _StrictDecoder(
    parse_constant=_refuse_constant,
    parse_float=_finite_float,
    parse_int=_bounded_int,
    object_pairs_hook=_unique_keys,
)


#: Compact, strict (no NaN), not ASCII-escaped: how results are stored.
_COMPACT = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def compact_json(value: object) -> str:
    """``value`` as :data:`_COMPACT` encodes it (a cycle is "Circular reference detected")."""
    return _COMPACT.encode(value)


#: Deepest nesting of arrays and objects a stored value may have. Python's encoder and decoder
#: recurse once a level, within a limit shared with the frames below them: a value stored from
#: a shallow stack (the store thread's) failed to encode again deep in a server's (a
#: RecursionError, a 500 halfway through an answer) past about 950 levels.
MAX_DEPTH = 256

#: Outside its strings, compact JSON holds only these besides brackets.
_NOT_BRACKETS = str.maketrans("", "", "0123456789+-.eEtrufalsn,: \n\t\r")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nested_deeper_than(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON ``text`` nests arrays and objects more than ``limit`` deep. Costs a
    count of brackets for any text with fewer than ``limit`` of them (almost every one), and
    string operations in C for the rest."""
    if text.count("[") + text.count("{") <= limit:
        return False
    # Escapes are inside strings only; without them, every other '"' opens a string.
    bare = text.replace("\\\\", "").replace('\\"', "")
    brackets = "".join(bare.split('"')[::2]).translate(_NOT_BRACKETS)
    return max(itertools.accumulate(_STEP[c] for c in brackets)) > limit
