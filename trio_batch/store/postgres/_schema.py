"""The PostgreSQL schema: creating it, checking its version, and migrating it.

The version is one row in ``trio_batch_schema``. Creation and migration run in one transaction
under an advisory transaction lock (no session lock: the connection may come from a pooler),
so runners on several hosts starting at once do not race: the first creates, the others wait
for it and then find the schema current (READ COMMITTED: each statement after the wait sees
what the first committed). PostgreSQL's DDL is
transactional, so a migration that fails leaves nothing half-made.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from ..._errors import SchemaVersionError
from . import _create_queries as cq
from . import _host_queries as hq
from . import _live_queries as lq
from . import _outbox_queries as oq
from . import _outcome_queries as wq
from . import _queries as q
from . import _schema_queries as sq

__all__ = ["SCHEMA_VERSION", "migrate"]

#: The schema version this code writes.
SCHEMA_VERSION = 17


def migrate(
    conn: psycopg.Connection[Any],
    location: str,
    transaction: Callable[[], AbstractContextManager[object]],
) -> None:
    """Create or upgrade the schema to :data:`SCHEMA_VERSION`, idempotently.

    A database written by a newer version, or with our table names but no version, raises
    :class:`~trio_batch.SchemaVersionError` and is left untouched. ``conn`` is in autocommit
    mode; ``transaction()`` opens a transaction on it (with the migration's bounds);
    ``location`` names the database in messages.
    """
    version = _version(conn)
    if version == SCHEMA_VERSION:
        return  # the common case takes no lock
    _check_version(version, location)
    with transaction():
        conn.execute(q.XACT_LOCK, (q.LOCK_CLASS, q.LOCK_MIGRATE))
        version = _version(conn)  # another host may have migrated while we waited
        _check_version(version, location)
        if version == 0:
            for table in ("jobs", "targets", "runners"):
                if _table_exists(conn, table):
                    raise SchemaVersionError(
                        f"{location} has a {table!r} table but no trio_batch schema version; "
                        "it is not a trio_batch database (use another database, or a schema "
                        "of its own through the search_path)"
                    )
            for statement in sq.CREATE_SCHEMA_V1:
                conn.execute(statement)
        if version < 2:
            # custom ids, metadata, parents, labels and the filtered lists' indexes
            for statement in sq.MIGRATE_V2_BATCH_DATA:
                conn.execute(statement)
        if version < 3:
            # The outbox: one row per job that is to tell of its end (webhook, on_terminal).
            for statement in oq.CREATE_OUTBOX:
                conn.execute(statement)
        if version < 4:
            # The job's trace context, for the runner that reaps it or delivers its event.
            conn.execute(q.ADD_TRACE_CONTEXT)
        if version < 5:
            # Per-host limits shared by the runners: leased request slots, pause and rate.
            for statement in hq.CREATE_HOST_LIMITS:
                conn.execute(statement)
        if version < 7:
            # A terminal job's lease indexed, not every job's: outcomes' updates are HOT.
            for statement in q.MIGRATE_V7_TERMINAL_LEASE:
                conn.execute(statement)
        if version < 11:
            # The submit as a function (v9), one statement, one round trip, pooler or not;
            # plain targets from their URLs alone (v10); the targets as JSON text (v11).
            # The old one is dropped (v11 changed its arguments' types); v13 makes it.
            conn.execute(cq.DROP_CREATE_JOB_FUNCTION)
        if version < 12:
            # Waits on other runners' jobs registered: a job's end notified only if awaited.
            for statement in wq.MIGRATE_V12_WAITS:
                conn.execute(statement)
        if version < 13:
            # The submit's function again: the creation lock tried first, so a submit that
            # finds it free reads its admission once, under it.
            conn.execute(cq.CREATE_CREATE_JOB_FUNCTION)
        if version < 14:
            # The live jobs counted from a narrow table of their own, kept by triggers; the
            # submit's function made again to read it.
            for statement in lq.MIGRATE_V14_LIVE_JOBS:
                conn.execute(statement)
            conn.execute(cq.CREATE_CREATE_JOB_FUNCTION)
        if version < 15:
            # What every outcome changes kept in the live job's narrow row: its updates HOT.
            # The submit's function made again to read a live job's lease there.
            for statement in lq.MIGRATE_V15_PROGRESS:
                conn.execute(statement)
            conn.execute(cq.CREATE_CREATE_JOB_FUNCTION)
        if version < 16:
            # A shared commit's outcomes in one statement: one function for them all. The
            # one-outcome function of 6 to 15 stays, for runners of those versions still up.
            for statement in wq.MIGRATE_V16_OUTCOMES:
                conn.execute(statement)
        if version < 17:
            # Each result's size beside it; the outcomes' function made again to write it.
            for statement in wq.MIGRATE_V17_RESULT_SIZE:
                conn.execute(statement)
        # Later versions add their steps here: `if version < 18: ...`.
        conn.execute(sq.SET_VERSION, (SCHEMA_VERSION,))


def _table_exists(conn: psycopg.Connection[Any], name: str) -> bool:
    row = conn.execute(sq.FIND_TABLE, (name,)).fetchone()
    return bool(row and row[0])


def _version(conn: psycopg.Connection[Any]) -> int:
    """The stored schema version; 0 for a database with none."""
    if not _table_exists(conn, "trio_batch_schema"):
        return 0
    row = conn.execute(sq.GET_VERSION).fetchone()
    return 0 if row is None else int(row[0])


def _check_version(version: int, location: str) -> None:
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{location} has schema version {version}, newer than the {SCHEMA_VERSION} "
            "this trio_batch understands; upgrade trio_batch to open it"
        )
