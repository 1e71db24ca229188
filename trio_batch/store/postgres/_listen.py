"""LISTEN for the jobs other runners change, so a runner reacts at once instead of at its poll.

Runners notify the channel ``trio_batch`` with a job's id when it is cancelled, released, reaped
or finished (see ``_store``). :func:`listen_for_changes` holds one extra connection per runner,
in autocommit, that has run ``LISTEN trio_batch``; it waits in trio for the socket to become
readable (no thread: a cancel stops it at once) and reads the notifications the way psycopg's
own ``Connection.notifies`` does. Connecting and ``LISTEN`` are blocking calls, made on a worker
thread.

A notification can be lost (the connection drops, the server restarts): the listener reconnects
with backoff and, each time it is listening again, reports that anything may have changed. The
runner's poll every ``Config.poll_interval`` keeps everything correct meanwhile.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any

import psycopg
import trio
from psycopg import sql

from .._protocol import ChangeObserver
from . import _queries as q

__all__ = ["listen_for_changes", "split_listen_option"]

_log = logging.getLogger("trio_batch")

#: Backoff between attempts to (re)open the listening connection, in seconds.
RECONNECT_FIRST_DELAY = 0.1
RECONNECT_MAX_DELAY = 5.0


def _connect(conninfo: str, connect_timeout: float) -> psycopg.Connection[Any]:
    conn = psycopg.connect(
        conninfo,
        autocommit=True,
        connect_timeout=max(1, round(connect_timeout)),
        application_name="trio_batch listen",
        # A peer gone without a word (a partition) is noticed, not waited on forever; libpq
        # ignores these on a Unix socket.
        keepalives=1,
        keepalives_idle=30,
        keepalives_interval=10,
        keepalives_count=3,
    )
    try:
        conn.execute(sql.SQL(q.LISTEN).format(sql.Identifier(q.CHANNEL)))
    except BaseException:
        conn.close()
        raise
    return conn


def _received(conn: psycopg.Connection[Any]) -> frozenset[str]:
    """The job ids of the notifications that have arrived; raises if the connection is lost."""
    pgconn = conn.pgconn
    pgconn.consume_input()
    ids: set[str] = set()
    while (notification := pgconn.notifies()) is not None:
        ids.add(notification.extra.decode("utf-8", "replace"))
    return frozenset(ids)


async def listen_for_changes(
    conninfo: str, on_change: ChangeObserver, *, connect_timeout: float
) -> None:
    """Forever: call ``on_change`` with the ids of jobs notified on the channel.

    Connects (and reconnects with backoff after a loss) on a connection of its own; after each
    successful ``LISTEN``, ``on_change(None)``. Notifications from this runner's own writes
    arrive too. Cancellation: stops at once, closing the connection; a connection attempt under
    way completes first (bounded by ``connect_timeout``).
    """
    delay = RECONNECT_FIRST_DELAY
    while True:
        try:
            conn = await trio.to_thread.run_sync(_connect, conninfo, connect_timeout)
        except psycopg.Error as exc:
            _log.warning("could not listen for other runners' changes; retrying: %s", exc)
            await trio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_DELAY)
            continue
        delay = RECONNECT_FIRST_DELAY
        try:
            on_change(None)  # anything may have changed while nobody listened
            while True:
                await trio.lowlevel.wait_readable(conn.fileno())
                changed = _received(conn)
                if changed:
                    on_change(changed)
        except psycopg.Error as exc:
            _log.warning("lost the connection listening for other runners' changes: %s", exc)
        finally:
            conn.close()


def split_listen_option(conninfo: str) -> tuple[str, bool | None]:
    """``conninfo`` without trio_batch's own ``listen`` URL parameter, and its value.

    ``postgresql://.../db?listen=off`` (or ``false``, ``no``, ``0``) runs without LISTEN, as
    behind PgBouncer in transaction mode; ``on`` (``true``, ``yes``, ``1``) with it. None if
    the parameter is absent (or ``conninfo`` is in libpq's keyword form, which has no such
    keyword). Raises ValueError for another value.
    """
    base, mark, query = conninfo.partition("?")
    if not mark or "://" not in base:
        return conninfo, None
    kept: list[str] = []
    value: str | None = None
    for part in query.split("&"):
        key, _, raw = part.partition("=")
        if urllib.parse.unquote_plus(key) == "listen":
            value = urllib.parse.unquote_plus(raw).strip().lower()
        else:
            kept.append(part)
    if value is None:
        return conninfo, None
    if value not in _SWITCH:
        raise ValueError(
            f"PostgreSQL URL parameter listen={value!r}: use listen=off (behind PgBouncer in "
            "transaction mode) or listen=on"
        )
    return base + ("?" + "&".join(kept) if kept else ""), _SWITCH[value]


_SWITCH = {"on": True, "true": True, "yes": True, "1": True}
_SWITCH.update({"off": False, "false": False, "no": False, "0": False})
