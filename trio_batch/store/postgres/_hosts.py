"""Per-host limits shared by every runner on one PostgreSQL database.

A request to a host takes a leased slot row (``host_slots``): at most ``cap`` live rows per
host. A slot that outlives its lease (its runner was killed) is deleted by the next acquire
of that host, so a dead runner's slots free themselves. ``host_state`` holds the host-wide
pause (only ever extended) and the rate's next start. Each acquire and release is one short
transaction; the acquire holds a transaction advisory lock on the host so that the count and
the insert cannot race. All times are the database's clock.
"""

from __future__ import annotations

from . import _host_queries as hq
from . import _queries as q
from ._connection import Conn, Op
from ._store import PostgresStore

__all__ = ["acquire_host_slot", "pause_host", "release_host_slot"]


def acquire_host_slot(
    store: PostgresStore, host: str, slot: str, *, cap: int, rate: float | None, lease: float
) -> float | None:
    """Take one of ``host``'s ``cap`` slots as ``slot`` for ``lease`` seconds: None; or the
    seconds to wait when the host is paused (the pause left), full (0), or its rate's next
    start is ahead (the time until it). Not retried after a lost connection mid-write: a
    slot it may have taken expires with its lease (or the caller's release removes it)."""
    values = {"host": host}

    def attempt(conn: Conn) -> float | None:
        with store._tx(conn, Op.WRITE):
            conn.execute(hq.HOST_LOCK, (q.LOCK_CLASS, host))
            conn.execute(hq.HOST_DROP_EXPIRED, values)
            row = conn.execute(hq.HOST_LOOK, values).fetchone()
            assert row is not None
            now, paused_until, next_start, held = float(row[0]), row[1], row[2], int(row[3])
            if paused_until > now:
                return float(paused_until - now)
            if held >= cap:
                return 0.0
            if rate is not None:
                if next_start > now:
                    return float(next_start - now)
                next_values = {"host": host, "next": max(now, next_start) + 1 / rate}
                conn.execute(hq.HOST_SET_NEXT_START, next_values)
            taken = {"id": slot, "host": host, "holder": store.runner_id, "lease": lease}
            conn.execute(hq.HOST_TAKE_SLOT, taken)
            return None

    return store._run(attempt)


def release_host_slot(store: PostgresStore, slot: str) -> None:
    """Give back a slot taken by :func:`acquire_host_slot`. Idempotent."""
    store._run(lambda c: store._one(c, Op.WRITE, hq.HOST_RELEASE_SLOT, (slot,)))


def pause_host(store: PostgresStore, host: str, seconds: float) -> None:
    """Pause ``host`` for every runner for ``seconds`` from now, unless already paused longer."""
    values = {"host": host, "pause": seconds}
    store._run(lambda c: store._one(c, Op.WRITE, hq.HOST_PAUSE, values))
