"""LISTEN for the jobs other runners change, so a runner reacts at once instead of at its poll.

Runners notify the channel ``trio_batch`` with a job's id when it is cancelled, and when it
ends or its drain stops if a runner waits on it, and with ``runner:`` and a runner's id when
that runner unregisters or is reaped (see ``_queries``). :func:`listen_for_changes`
holds one extra connection per runner, in autocommit, that has run ``LISTEN trio_batch``; it
waits in trio for the socket to become readable (no thread: a cancel stops it at once) and
reads the notifications the way psycopg's own ``Connection.notifies`` does. Connecting is a
blocking call, made on a worker thread (bounded by ``connect_timeout``); ``LISTEN`` is sent
from the loop, bounded by ``store_timeout``: a partition would hold a blocking one, and the
thread, for good.

LISTEN needs a session of its own, which a pooler in transaction mode does not give: the
``LISTEN`` would stay on whichever server connection ran it, which then serves other clients,
and its notifications would be dropped. So the listener asks first whether its connection is
pooled (as the store's own connection does, see ``pooled``) and sends no ``LISTEN`` through
one: it says so once and leaves the runner to its poll. A direct connection may still stop
hearing (a half-open TCP connection), so it checks itself: it sends a notification of its
own (a *probe*) through the store's connection at once and every ``probe_interval``, and one
that does not come back within ``store_timeout`` means the connection is deaf: it is closed
and opened again. The first miss is logged as a warning, with the remedy for a pooler (a
direct ``listen_url``), the later ones at INFO; a connection that never heard anything is
tried again with a long backoff.

A notification can be lost (the connection drops, the server restarts): each time it hears
again, the listener reports that anything may have changed. The runner's poll every
``Config.poll_interval`` keeps everything correct meanwhile.
"""

from __future__ import annotations

import logging
import random
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import trio
from psycopg import pq, sql

from ..._errors import StoreError
from ..._outage_log import OutageLog
from ..._retry import RetryPolicy
from .._protocol import ChangeObserver
from . import _queries as q
from ._connection import connect_options, pooled, safe_location

__all__ = [
    "PROBE_INTERVAL",
    "PROBE_PREFIX",
    "listen_for_changes",
    "pop_url_parameter",
    "split_listen_option",
]

_log = logging.getLogger("trio_batch")

#: Backoff between attempts to (re)open the listening connection, in seconds, each spread by
#: +-50% (runners cut off together do not come back in step).
RECONNECT_FIRST_DELAY = 0.1
RECONNECT_MAX_DELAY = 5.0
_RECONNECT = RetryPolicy(
    first_delay=RECONNECT_FIRST_DELAY, max_delay=RECONNECT_MAX_DELAY, multiplier=2.0, jitter=0.5
)
#: Backoff after a listening connection that heard nothing at all (LISTEN through a pooler).
DEAF_FIRST_DELAY = 30.0
DEAF_MAX_DELAY = 600.0
#: Seconds between probes of a listening connection that works.
PROBE_INTERVAL = 15.0
#: The payload of a probe starts so; never a job id (those have no colon).
PROBE_PREFIX = "probe:"

Probe = Callable[[str], Awaitable[None]]


def _connect(
    conninfo: str, connect_timeout: float, store_timeout: float
) -> psycopg.Connection[Any]:
    options = connect_options(
        conninfo, store_timeout=store_timeout, connect_timeout=connect_timeout
    )
    return psycopg.connect(
        conninfo,
        autocommit=True,
        prepare_threshold=None,
        application_name="trio_batch listen",
        **options,
    )


class PooledListenUrl(Exception):
    """The URL to LISTEN on goes through a pooler in transaction mode (see :func:`pooled`):
    no ``LISTEN`` is sent there."""


async def _open_listening(
    conninfo: str, connect_timeout: float, store_timeout: float
) -> psycopg.Connection[Any]:
    """A connection that has run ``LISTEN`` on the channel; psycopg's error if it could not
    be opened, or a statement was refused or not answered within ``store_timeout``.

    Raises :class:`PooledListenUrl`, having sent no ``LISTEN``, if the connection goes
    through a pooler: a ``LISTEN`` there sticks to whichever server connection ran it, which
    then serves other clients' transactions, and the notifications it gets are dropped (and
    PgBouncer logs "got packet from server when not linked")."""
    conn = await trio.to_thread.run_sync(_connect, conninfo, connect_timeout, store_timeout)
    try:
        (answer,) = await _ask(conn, q.BACKEND_PID.encode(), store_timeout)
        if pooled(conn, _first_int(answer)):
            raise PooledListenUrl(safe_location(conninfo))
        await _ask(
            conn, sql.SQL(q.LISTEN).format(sql.Identifier(q.CHANNEL)).as_bytes(conn), store_timeout
        )
    except BaseException:
        conn.close()
        raise
    return conn


def _first_int(result: pq.abc.PGresult) -> int | None:
    """The first column of ``result``'s first row as an integer; None if it has none."""
    value = result.get_value(0, 0) if result.ntuples else None
    return None if value is None else int(bytes(value))


async def _ask(conn: psycopg.Connection[Any], query: bytes, within: float) -> list[pq.abc.PGresult]:
    """Send ``query`` on ``conn`` (idle, non-blocking) from the loop and read its results,
    within ``within`` seconds; psycopg's error for a refused statement."""
    pgconn = conn.pgconn
    results: list[pq.abc.PGresult] = []
    with trio.move_on_after(within):
        pgconn.send_query(query)
        await _flush(pgconn)
        while True:
            while pgconn.is_busy():
                await trio.lowlevel.wait_readable(pgconn.socket)
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                return results
            if result.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
                raise _error(result)
            results.append(result)
    raise psycopg.OperationalError(f"no answer within store_timeout ({within:g} s)")


def _received(conn: psycopg.Connection[Any]) -> tuple[frozenset[str], frozenset[str]]:
    """The job ids and the probes among the notifications that have arrived; raises if the
    connection is lost."""
    pgconn = conn.pgconn
    pgconn.consume_input()
    ids: set[str] = set()
    probes: set[str] = set()
    while (notification := pgconn.notifies()) is not None:
        payload = notification.extra.decode("utf-8", "replace")
        (probes if payload.startswith(PROBE_PREFIX) else ids).add(payload)
    return frozenset(ids), frozenset(probes)


async def listen_for_changes(
    conninfo: str,
    on_change: ChangeObserver,
    *,
    connect_timeout: float,
    store_timeout: float,
    probe: Probe | None = None,
    probe_interval: float = PROBE_INTERVAL,
) -> None:
    """Forever: call ``on_change`` with the ids of jobs notified on the channel.

    Connects (and reconnects with backoff after a loss) on a connection of its own; once it
    hears (its first probe came back; at once without ``probe``), ``on_change(None)``.
    ``probe(payload)`` sends a notification with that payload through another connection (the
    store's). Notifications from this runner's own writes arrive too. Cancellation: stops at
    once, closing the connection; a connection attempt under way completes first (bounded by
    ``connect_timeout``).
    """
    failures = 0
    rng = random.Random()
    deaf_delay = DEAF_FIRST_DELAY
    told_deaf = False
    outage = OutageLog(_log, "listen for other runners' changes")
    while True:
        try:
            conn = await _open_listening(conninfo, connect_timeout, store_timeout)
        except PooledListenUrl:
            _log.warning(
                "LISTEN on %s would go through a pooler in transaction mode, where it cannot "
                "work; not listening. Give a direct URL for LISTEN (listen_url, --listen-db); "
                "meanwhile other runners' changes are seen at each poll (Config.poll_interval)",
                safe_location(conninfo),
            )
            await trio.sleep_forever()
        except psycopg.Error as exc:
            outage.refused(exc)
            failures += 1
            await trio.sleep(_RECONNECT.delay(failures, rng=rng))
            continue
        outage.answered()
        failures = 0
        try:
            heard = await _listen(conn, on_change, probe, probe_interval, store_timeout)
        except psycopg.Error as exc:
            _log.warning("lost the connection listening for other runners' changes: %s", exc)
            continue
        finally:
            conn.close()
        if not told_deaf:
            told_deaf = True
            _log.warning(
                "LISTEN on %s receives nothing (its own notification did not come back within "
                "store_timeout, %g s); reconnecting. If this is a pooler in transaction mode, "
                "give a direct URL for LISTEN (listen_url, --listen-db); meanwhile other "
                "runners' changes are seen at each poll (Config.poll_interval)",
                safe_location(conninfo),
                store_timeout,
            )
        else:
            _log.info("the connection listening for other runners' changes is deaf; reconnecting")
        if heard:  # it worked, then stopped (a half-open connection): again at once
            deaf_delay = DEAF_FIRST_DELAY
            continue
        await trio.sleep(deaf_delay)
        deaf_delay = min(deaf_delay * 2, DEAF_MAX_DELAY)


async def _listen(
    conn: psycopg.Connection[Any],
    on_change: ChangeObserver,
    probe: Probe | None,
    interval: float,
    answer_within: float,
) -> bool:
    """Hand the notifications arriving on ``conn`` to ``on_change`` until a probe does not
    come back in ``answer_within`` seconds; returns whether any probe had come back (False:
    deaf from the start). Raises psycopg's error if the connection is lost."""
    token = f"{PROBE_PREFIX}{secrets.token_hex(8)}:"
    sent = 0
    heard = probe is None
    if heard:
        on_change(None)  # anything may have changed while nobody listened
    next_probe = trio.current_time()
    awaiting: str | None = None
    wait_until = next_probe
    while True:
        if probe is not None and awaiting is None and trio.current_time() >= next_probe:
            sent += 1
            awaiting = f"{token}{sent}"
            try:
                await probe(awaiting)
            except StoreError:  # the database is out of reach: nothing to judge by
                awaiting = None
                next_probe = trio.current_time() + interval
                continue
            wait_until = trio.current_time() + answer_within
        deadline = wait_until if awaiting is not None else next_probe
        if probe is None:
            deadline = trio.current_time() + 86400.0
        with trio.move_on_at(deadline):
            await trio.lowlevel.wait_readable(conn.fileno())
        changed, probes = _received(conn)
        if awaiting is not None and awaiting in probes:
            awaiting = None
            next_probe = trio.current_time() + interval
            if not heard:
                heard = True
                on_change(None)  # anything may have changed while nobody listened
        if any(payload.startswith(q.RUNNER_GONE) for payload in changed):
            on_change(None)  # the drains of a runner gone are over: every wait reads again
        elif changed:
            on_change(changed)
        if awaiting is not None and trio.current_time() >= wait_until:
            return heard


def split_listen_option(conninfo: str) -> tuple[str, bool | None]:
    """``conninfo`` without trio_batch's own ``listen`` URL parameter, and its value.

    ``postgresql://.../db?listen=off`` (or ``false``, ``no``, ``0``) runs without LISTEN (say,
    behind a pooler without a direct ``listen_url``); ``on`` (``true``, ``yes``, ``1``) with it.
    None if the parameter is absent (or ``conninfo`` is in libpq's keyword form, which has no such
    keyword). Raises ValueError for another value.
    """
    conninfo, value = pop_url_parameter(conninfo, "listen")
    if value is None:
        return conninfo, None
    value = value.strip().lower()
    if value not in _SWITCH:
        raise ValueError(
            f"PostgreSQL URL parameter listen={value!r}: use listen=off (behind PgBouncer in "
            "transaction mode) or listen=on"
        )
    return conninfo, _SWITCH[value]


def pop_url_parameter(conninfo: str, key: str) -> tuple[str, str | None]:
    """``conninfo`` without the URL parameter ``key`` (one of trio_batch's own, which libpq
    would refuse), and its value (decoded); None if absent or ``conninfo`` is no URL."""
    base, mark, query = conninfo.partition("?")
    if not mark or "://" not in base:
        return conninfo, None
    kept: list[str] = []
    value: str | None = None
    for part in query.split("&"):
        name, _, raw = part.partition("=")
        if urllib.parse.unquote_plus(name) == key:
            value = urllib.parse.unquote_plus(raw)
        else:
            kept.append(part)
    if value is None:
        return conninfo, None
    return base + ("?" + "&".join(kept) if kept else ""), value


_SWITCH = {"on": True, "true": True, "yes": True, "1": True}
_SWITCH.update({"off": False, "false": False, "no": False, "0": False})


async def _flush(pgconn: pq.abc.PGconn) -> None:
    """Send what libpq has queued. While the socket is full, what the server answers
    meanwhile is read too, so neither side waits on the other."""
    while pgconn.flush():
        pgconn.consume_input()
        async with trio.open_nursery() as nursery:  # whichever comes first

            async def wait(ready: Callable[[int], Any]) -> None:
                await ready(pgconn.socket)
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait, trio.lowlevel.wait_writable)
            nursery.start_soon(wait, trio.lowlevel.wait_readable)


def _error(result: pq.abc.PGresult) -> psycopg.Error:
    """The psycopg exception of a refused statement's result, by its SQLSTATE."""
    state = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode("ascii", "replace")
    try:
        cls = psycopg.errors.lookup(state)
    except KeyError:
        cls = psycopg.DatabaseError
    return cls(result.get_error_message().strip())
