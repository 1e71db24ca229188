"""The SQL of the per-host limits the runners share (schema version 5): leased request slots,
pause and rate.

Part of the PostgreSQL store's SQL, named as in :mod:`._queries` (the rest of it); all values
are bound parameters.
"""

from __future__ import annotations

__all__: list[str] = []  # imported as a module: ``from . import _host_queries as hq``

# Times are the database's clock (epoch seconds), so the runners' clocks need not agree.

CREATE_HOST_LIMITS = (
    """CREATE TABLE host_slots (
        id text PRIMARY KEY,
        host text NOT NULL,
        holder text,
        expires_at double precision NOT NULL
    )""",
    "CREATE INDEX host_slots_host ON host_slots (host, expires_at)",
    """CREATE TABLE host_state (
        host text PRIMARY KEY,
        paused_until double precision NOT NULL DEFAULT 0,
        next_start double precision NOT NULL DEFAULT 0
    )""",
)

#: One host's state at a time: the slots count and insert cannot race (a transaction lock,
#: which works behind a transaction pooler).
HOST_LOCK = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
HOST_DROP_EXPIRED = (
    "DELETE FROM host_slots WHERE host = %(host)s AND expires_at < extract(epoch FROM now())"
)
#: The database's now, the host's pause and next start (0 if none), and its slots held.
HOST_LOOK = """SELECT extract(epoch FROM now()),
    coalesce((SELECT paused_until FROM host_state WHERE host = %(host)s), 0),
    coalesce((SELECT next_start FROM host_state WHERE host = %(host)s), 0),
    (SELECT count(*) FROM host_slots WHERE host = %(host)s)"""
HOST_TAKE_SLOT = """INSERT INTO host_slots (id, host, holder, expires_at)
    VALUES (%(id)s, %(host)s, %(holder)s, extract(epoch FROM now()) + %(lease)s)
    ON CONFLICT (id) DO NOTHING"""
HOST_SET_NEXT_START = """INSERT INTO host_state (host, next_start) VALUES (%(host)s, %(next)s)
    ON CONFLICT (host) DO UPDATE SET next_start = EXCLUDED.next_start"""
HOST_RELEASE_SLOT = "DELETE FROM host_slots WHERE id = %s"
#: With the purge: slots whose lease lapsed (their holders died) and hosts whose pause and
#: rate are over, which read the same as no row; a row being changed is re-checked by the DELETE.
HOST_SWEEP = (
    "DELETE FROM host_slots WHERE expires_at < extract(epoch FROM now())",
    """DELETE FROM host_state
    WHERE paused_until < extract(epoch FROM now()) AND next_start < extract(epoch FROM now())""",
)
#: A pause only ever grows: the latest end any runner set wins.
HOST_PAUSE = """INSERT INTO host_state (host, paused_until)
    VALUES (%(host)s, extract(epoch FROM now()) + %(pause)s)
    ON CONFLICT (host) DO UPDATE
    SET paused_until = greatest(host_state.paused_until, EXCLUDED.paused_until)"""
