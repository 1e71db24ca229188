"""Retrying a store call the database refused, with backoff: how the runner rides out a
locked or briefly unavailable database without failing the job at once."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import trio

from .._errors import StoreUnavailable

__all__ = ["RETRY_FIRST_DELAY", "RETRY_MAX_DELAY", "retry_refused"]

T = TypeVar("T")

#: Backoff between attempts at a write the database refused, in seconds.
RETRY_FIRST_DELAY = 0.05
RETRY_MAX_DELAY = 2.0


async def retry_refused(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    give_up_at: float | None,
    log: logging.Logger,
    extra: Mapping[str, Any],
    refused: StoreUnavailable | None = None,
) -> T:
    """``await call()``, retried with backoff while the database refuses it.

    Each refusal but the last is logged as a warning ("could not ``what``; retrying"). Gives up,
    re-raising :class:`StoreUnavailable`, once the next attempt would start after
    ``give_up_at`` (trio time; None: never). ``refused``: the refusal of a first attempt the
    caller made itself (a hot path, with no closure for a call that succeeds); the backoff
    starts from it. Cancellation: the waits between attempts can be cancelled (at shutdown);
    an attempt itself cannot (store calls run to completion).
    """
    delay = RETRY_FIRST_DELAY
    while True:
        if refused is None:
            try:
                return await call()
            except StoreUnavailable as exc:
                refused = exc
        if give_up_at is not None and trio.current_time() + delay > give_up_at:
            raise refused
        log.warning(f"could not {what}; retrying", exc_info=refused, extra=extra)
        refused = None
        await trio.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_DELAY)
