"""Decoding JSON sent by users (request bodies, batch files): strict, with errors a person can
act on.

Python's decoder accepts ``NaN`` and ``Infinity`` (not JSON) and fails on an integer of more
than 4300 digits with a message telling the reader to call ``sys.set_int_max_str_digits()``,
advice meant for the service's programmer, not its caller. :data:`STRICT_JSON` refuses both
with plain messages, as ``json.JSONDecodeError`` (a ValueError) carrying the position.
"""

from __future__ import annotations

import json

__all__ = ["MAX_INT_DIGITS", "STRICT_JSON"]

#: Most digits an integer in user JSON may have (Python's own conversion limit).
MAX_INT_DIGITS = 4300


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"a number of {digits} digits; at most {MAX_INT_DIGITS} are accepted")
    return int(text)


class _StrictDecoder(json.JSONDecoder):
    """Turns a refusal inside a hook into a JSONDecodeError with the document's position."""

    def raw_decode(self, s: str, idx: int = 0) -> tuple[object, int]:
        try:
            return super().raw_decode(s, idx)
        except json.JSONDecodeError:
            raise
        except ValueError as exc:  # from a hook: no position of its own
            raise json.JSONDecodeError(str(exc), s, idx) from None


#: The decoder for JSON from users: ``STRICT_JSON.decode(text)`` or ``.raw_decode(text, pos)``.
STRICT_JSON = _StrictDecoder(parse_constant=_refuse_constant, parse_int=_bounded_int)
