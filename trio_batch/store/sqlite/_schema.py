"""The SQLite schema: creating it, checking its version, and migrating it.

The version is kept in ``PRAGMA user_version``. Tables are STRICT and built through
sqlite-utils; any SQLite or Datasette user can read them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlite_utils import Database

from ..._errors import SchemaVersionError
from . import _queries as q

if TYPE_CHECKING:
    from ._connection import Connection

__all__ = ["SCHEMA_VERSION", "check", "migrate"]

#: The schema version this code writes, kept in ``PRAGMA user_version``.
SCHEMA_VERSION = 6

#: Every table the migrations make. A database with none of them and no version is new to us;
#: one with any of them but no version is another program's, and is refused before anything
#: is written (a migration stopped by its table would be too late: the file is in WAL by then).
TABLES = ("jobs", "targets", "job_labels", "outbox")


def migrate(store: Connection) -> None:
    """Create or upgrade ``store``'s schema to :data:`SCHEMA_VERSION`, idempotently.

    A database written by a newer version, or with our table names but no version, raises
    :class:`~trio_batch.SchemaVersionError` and is left untouched (see :func:`check`).
    """
    version = check(store.db, store.path)
    if version == SCHEMA_VERSION:
        return  # the common case takes no write lock, so readers can open beside a runner
    with store.transaction():
        version = check(store.db, store.path)  # another process may have migrated meanwhile
        if version == 0:
            _create_schema_v1(store.db)
        if version < 2:
            _migrate_v2_attempts(store.db)
        if version < 3:
            _migrate_v3_batch_data(store.db)
        if version < 4:
            _migrate_v4_outbox(store.db)
        if version < 5:
            # The job's trace context, for the runner that reaps it or delivers its event.
            store.db.execute(q.ADD_TRACE_CONTEXT)
        if version < 6:
            # Each result's size, so the job view need not read every result to size it.
            store.db.execute(q.ADD_RESULT_SIZE)
        # Later versions add their steps here: `if version < 7: ...`.
        store.db.execute(f"PRAGMA user_version={SCHEMA_VERSION:d}")


def check(db: Database, path: str) -> int:
    """The schema version of ``db``, found by reading alone: nothing is written.

    Raises :class:`~trio_batch.SchemaVersionError` for a database this code must refuse:
    written by a newer version, or with one of our :data:`TABLES` but no version (another
    program's). Run it before anything that writes, even a pragma such as
    ``journal_mode=WAL``, which stays in the file: a refused database is left as it was.
    """
    version = _user_version(db)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path!r} has schema version {version}, newer than the {SCHEMA_VERSION} "
            "this trio_batch understands; upgrade trio_batch to open it"
        )
    if version == 0:
        present = set(db.table_names())
        found = [name for name in TABLES if name in present]
        if found:
            raise SchemaVersionError(
                f"{path!r} has a {found[0]!r} table but no trio_batch schema version; "
                "it is not a trio_batch database"
            )
    return version


def _user_version(db: Database) -> int:
    row = db.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def _create_schema_v1(db: Database) -> None:
    db.create_table(
        "jobs",
        {
            "id": str,
            "caller": str,
            "caller_class": str,
            "idem_key": str,
            "status": str,
            "error": str,
            "targets_total": int,
            "targets_done": int,
            "targets_failed": int,
            "results_size": int,
            "created_at": float,
            "updated_at": float,
            "expires_at": float,
        },
        pk="id",
        not_null={
            "caller",
            "caller_class",
            "idem_key",
            "status",
            "targets_total",
            "targets_done",
            "targets_failed",
            "results_size",
            "created_at",
            "updated_at",
            "expires_at",
        },
        defaults={"targets_done": 0, "targets_failed": 0, "results_size": 0},
        strict=True,
    )
    db.create_table(
        "targets",
        {
            "job_id": str,
            "idx": int,
            "url": str,
            "options": str,
            "status": str,
            "result": str,
            "error": str,
            "hint": str,
            "finished_at": float,
        },
        pk=("job_id", "idx"),
        foreign_keys=[("job_id", "jobs", "id")],
        not_null={"url", "options", "status"},
        strict=True,
    )
    jobs = db.table("jobs")
    # Idempotency lookup: (caller, idem_key), then the lease is checked on the few rows found.
    # expires_at stays out of this index: every target write changes it.
    jobs.create_index(["caller", "idem_key"], "jobs_idempotency")
    # Live counts, per caller and in total: status IN ('queued', 'running') [AND caller = ?].
    jobs.create_index(["status", "caller"], "jobs_status")
    # Retention: purge by lease, and list recent jobs.
    jobs.create_index(["expires_at"], "jobs_expiry")


def _migrate_v2_attempts(db: Database) -> None:
    """Version 2: ``targets.attempts``, how many attempts a stored outcome took (retries).

    Outcomes stored before version 2 took exactly one attempt.
    """
    db.table("targets").add_column("attempts", int, not_null_default=0)
    db.execute(q.MIGRATE_V2_ATTEMPTS)


def _migrate_v3_batch_data(db: Database) -> None:
    """Version 3: ``targets.custom_id``, ``jobs.metadata`` and ``jobs.parent_id``, the
    ``job_labels`` table (one row per metadata key, for label filters) and the indexes of a
    caller's filtered lists.

    Jobs stored before version 3 have no metadata (``'{}'``), no parent and no labels.
    """
    for statement in q.MIGRATE_V3_BATCH_DATA:
        db.execute(statement)


def _migrate_v4_outbox(db: Database) -> None:
    """Version 4: ``outbox``, one row per job that is to tell of its end (a webhook or
    ``Config.on_terminal``), filled with the event when its status becomes terminal."""
    for statement in q.CREATE_OUTBOX:
        db.execute(statement)
