"""Text the model and the front ends share: strict numbers, safe error text, JSON type names.

Pure functions of their arguments, with no knowledge of jobs or stores.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CONTROL_CHARACTER",
    "MAX_ERROR_LENGTH",
    "MAX_INDEX",
    "MAX_INT64",
    "MAX_MILLISECONDS",
    "MAX_SECONDS",
    "check_seconds",
    "check_whole",
    "is_finite",
    "json_type",
    "parse_count",
    "parse_decimal",
    "printable",
    "printable_json",
    "safe_text",
    "unknown_keys",
]

#: Longest error or hint text stored for a target.
MAX_ERROR_LENGTH = 4096
#: Most seconds a caller may give for a time (a century): a lease or timeout this long is
#: "never" for any batch, and ``time.time()`` plus it is still a date every part can show.
MAX_SECONDS = 100 * 365 * 86400
#: Most seconds of a timeout handed on in whole milliseconds to a C ``int``: SQLite's busy
#: timeout, PostgreSQL's ``statement_timeout`` (2**31 - 1 ms, about 24.8 days).
MAX_MILLISECONDS = (2**31 - 1) / 1000
#: The largest target index a store holds (a 32-bit column on PostgreSQL).
MAX_INDEX = 2**31 - 1
#: The largest integer SQLite and PostgreSQL's ``bigint`` store, and a C ``long`` holds.
MAX_INT64 = 2**63 - 1


#: Characters that steer a terminal or reorder text rather than show: C0 and C1 controls, DEL,
#: and the bidirectional marks and overrides (U+202E makes ``gnp.exe`` read ``exe.png``).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
CONTROL_CHARACTER = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_UNPRINTABLE_LINE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")  # keeps \t and \n


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, multiline: bool = False) -> str:
    """``text`` safe to print on a terminal: every :data:`CONTROL_CHARACTER` spelled as
    ``\\x1b`` or ``\\u202e``, so fetched content or a URL cannot move the cursor, retitle the
    window, clear the screen or reverse what follows. With ``multiline`` tabs and line breaks
    are kept (``\\r\\n`` read as one), else a line break is escaped like the rest, so one
    field prints as one line."""
    if multiline:
        return _UNPRINTABLE_LINE.sub(_escaped, text.replace("\r\n", "\n"))
    return CONTROL_CHARACTER.sub(_escaped, text)


_UNPRINTABLE_IN_JSON = re.compile(f"[\x7f-\x9f{_BIDI}]")  # json.dumps escapes C0 itself


def printable_json(text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with DEL, the C1 controls and
    the bidi characters written as ``\\u`` escapes: the same JSON value, safe on a terminal.
    None of them can appear outside a string, so no other part of the text changes."""
    return _UNPRINTABLE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def parse_count(text: str, *, max_digits: int = 18) -> int | None:
    """The number ``text`` spells in ASCII digits (``0-9`` only), or None if it is not one.

    ``str.isdigit`` also accepts ``²`` or ``٣``, which ``int`` then rejects or reads; header,
    path and option values are parsed with this instead. Longer than ``max_digits``: None.
    """
    if not 0 < len(text) <= max_digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)


#: A decimal number in ASCII: digits, a point, an exponent; no sign, space, "_", "nan".
_DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def parse_decimal(text: str) -> float | None:
    """The finite, non-negative number ``text`` spells in ASCII (``2.5``, ``1e3``), or None.

    ``float`` alone also reads ``nan``, ``1_0``, `` 5 `` and other scripts' digits (``٣``),
    and reads ``1e400`` as infinity; values from URLs and options are parsed with this."""
    if len(text) > 400 or _DECIMAL.fullmatch(text) is None:
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def unknown_keys(obj: Mapping[Any, Any], known: Sequence[str]) -> str:
    """The keys of ``obj`` outside ``known``, sorted and quoted for a message; "" if none."""
    return ", ".join(repr(k) for k in sorted(map(str, obj)) if k not in known)


def is_finite(value: float) -> bool:
    """True for a finite number; False for NaN, an infinity, or an int past any float (for
    which ``math.isfinite`` raises OverflowError instead of answering)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_seconds(
    name: str, value: object, *, high: float = MAX_SECONDS, zero: bool = True
) -> float:
    """``value`` if it is a number of seconds from 0 (exclusive unless ``zero``) to ``high``;
    else TypeError (a bool, a non-number) or ValueError (NaN, an infinity, an int past any
    float, out of range), naming ``name`` and the value, cut short."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not is_finite(value):
        raise ValueError(f"{name} must be finite, not {safe_text(value, 40)}")
    if value < 0 or (value == 0 and not zero):
        must = "must not be negative" if zero else "must be positive"
        raise ValueError(f"{name} {must} (got {value:g})")
    if value > high:
        raise ValueError(f"{name} must be at most {high:g} seconds, not {value:g}")
    return value


def check_whole(
    name: str, value: object, *, low: int | None = 0, high: int | None = MAX_INT64
) -> int:
    """``value`` if it is an int (not a bool) from ``low`` to ``high`` (None: no bound); else
    TypeError or ValueError naming ``name`` and the value, cut short."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number, not {type(value).__name__}")
    if (low is not None and value < low) or (high is not None and value > high):
        upto = "" if high is None else f" to {high}"
        raise ValueError(
            f"{name} must be a whole number from {low}{upto}, not {safe_text(value, 40)}"
        )
    return value


def safe_text(value: object, limit: int = MAX_ERROR_LENGTH) -> str:
    """Render ``value`` as text every store keeps: never raises, bounded length, no lone
    surrogates, and no NUL (PostgreSQL's text refuses it): a NUL reads ``\\x00``."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # a hostile __str__ must not take the runner down
        text = f"<unprintable {type(value).__name__}>"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_type(obj: object) -> str:
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
