"""Options that ``trio-batch run`` and ``trio-batch serve`` share, defined once for both, and
the option types (whole numbers, positive numbers) every command checks its numbers with."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .._config import COMMAND_TARGET_TIMEOUT, Config
from .._errors import InvalidRequest
from .._retry import RetryPolicy
from .._targets import check_caller
from .._text import MAX_MILLISECONDS, MAX_SECONDS, parse_decimal, safe_text

__all__ = [
    "COMMAND_RETRIES",
    "EXIT_BUSY",
    "add_fetch_limits",
    "add_politeness",
    "add_store_options",
    "caller_name",
    "politeness",
    "positive_number",
    "retry_policy",
    "whole_number",
]

#: Exit code of ``run`` and ``serve`` when another runner holds the database: nothing was
#: submitted or served (unlike 1, a job that ran and failed, or another start-up failure).
EXIT_BUSY = 3
#: Retries of a target whose attempt failed with a transient error, unless told otherwise.
COMMAND_RETRIES = 2
#: How the commands space their retries: 1 s, then 2 s, ... at most 30 s, a server's
#: Retry-After honoured up to that cap, with 10% jitter.
_FIRST_DELAY = 1.0
_MAX_DELAY = 30.0


def retry_policy(retries: int) -> RetryPolicy | None:
    """The commands' policy for ``retries`` retries (``retries + 1`` attempts); 0: none."""
    if retries == 0:
        return None
    return RetryPolicy(attempts=retries + 1, first_delay=_FIRST_DELAY, max_delay=_MAX_DELAY)


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number in ASCII digits (``-`` before them for a negative
    one) from ``low`` to ``high``, else a usage error (exit 2) naming the range, never a
    number too large for the store to bind."""

    def parse(text: str) -> int:
        digits = text.removeprefix("-")
        if not (digits.isascii() and digits.isdigit()) or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {low} to {high}, not {text!r}"
            )
        return int(text)

    parse.__name__ = "whole number"
    return parse


def caller_name(what: str = "caller") -> Callable[[str], str]:
    """An argparse ``type``: a caller (or class) name :func:`~trio_batch.check_caller` takes,
    else a usage error (exit 2) saying what is wrong, before any store is opened: a name no
    job can have (a NUL, a control character, bytes that are not UTF-8) finds nothing."""

    def parse(text: str) -> str:
        try:
            return check_caller(text, what)
        except InvalidRequest as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = what
    return parse


def positive_number(
    unit: str = "", *, high: float | None = None, zero: bool = False
) -> Callable[[str], float]:
    """An argparse ``type``: a positive, finite number (of ``unit``, as the error says) in
    ASCII digits, at most ``high``; a number of seconds at most :data:`MAX_SECONDS` unless
    told otherwise. ``zero``: 0 is taken too (an option whose 0 means its default)."""
    if high is None and unit == "seconds":
        high = MAX_SECONDS
    what = f"a {'non-negative' if zero else 'positive'} number"
    what += f" of {unit}" if unit else ""
    if high is not None:
        what += f" up to {high:g}"

    def parse(text: str) -> float:
        value = parse_decimal(text)
        if value is None or (value <= 0 and not zero) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {what}, not {safe_text(text, 40)!r}")
        return value

    parse.__name__ = what
    return parse


def add_fetch_limits(parser: argparse.ArgumentParser) -> None:
    """``--target-timeout`` and ``--retries``."""
    parser.add_argument(
        "--target-timeout",
        type=positive_number("seconds"),
        default=COMMAND_TARGET_TIMEOUT,
        metavar="SECONDS",
        help="an attempt at a target taking longer fails with error 'timeout' "
        "(default: %(default)g)",
    )
    parser.add_argument(
        "--retries",
        type=whole_number(0, 100),
        default=COMMAND_RETRIES,
        metavar="N",
        help="retry a target up to N times when an attempt fails with a transient error (a "
        "refused or reset connection, a timeout, HTTP 408, 425, 429, 500, 502, 503 or 504), "
        f"waiting {_FIRST_DELAY:g} s, then twice as long each time, at most {_MAX_DELAY:g} s, "
        "or as long as the server's Retry-After asks within that; 0 turns retries off "
        "(default: %(default)s)",
    )


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """``--store-timeout`` and ``--listen-db`` (PostgreSQL stores)."""
    parser.add_argument(
        "--store-timeout",
        type=positive_number("seconds", high=MAX_MILLISECONDS),
        default=Config().store_timeout,
        metavar="SECONDS",
        help="PostgreSQL: the longest one database call may take before it fails "
        "(serve answers 503 with Retry-After) (default: %(default)g)",
    )
    parser.add_argument(
        "--listen-db",
        metavar="URL",
        help="PostgreSQL behind a pooler in transaction mode (PgBouncer): a direct "
        "postgresql:// URL of the same database, for LISTEN (without it, changes made by "
        "other runners are seen at each poll)",
    )


#: Requests in flight to one host at once, over every job, unless told otherwise.
PER_HOST_CONCURRENCY = 4


def add_politeness(parser: argparse.ArgumentParser) -> None:
    """The built-in fetcher's connection and per-host options (see ``politeness``)."""
    parser.add_argument(
        "--per-host-concurrency",
        type=whole_number(1, 1000),
        default=PER_HOST_CONCURRENCY,
        metavar="N",
        help="the built-in fetcher sends at most N requests at once to one host, over every "
        "job; a 429 (or a 503 with Retry-After) pauses that host for every job, as long as "
        "Retry-After asks or 1 s doubling with each 429 in a row, at most 30 s "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--per-host-rate",
        type=positive_number(),
        default=None,
        metavar="PER_SECOND",
        help="start at most this many requests a second to one host (default: no limit)",
    )
    parser.add_argument(
        "--http2",
        action="store_true",
        help="offer HTTP/2 to servers; one that takes it gets one multiplexed connection",
    )
    parser.add_argument(
        "--obey-robots",
        action="store_true",
        help="read each site's robots.txt first (once an hour) and fail the targets it "
        "disallows, with a hint; a site whose robots.txt fails with 5xx is not fetched for now",
    )


def politeness(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments ``add_politeness``'s options give ``HttpFetcher``."""
    return {
        "per_host_concurrency": args.per_host_concurrency,
        "per_host_rate": args.per_host_rate,
        "http2": args.http2,
        "obey_robots": args.obey_robots,
    }
