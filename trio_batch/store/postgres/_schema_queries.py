"""The SQL of the PostgreSQL store's schema, named: the version table, version 1's tables, and
version 2's move of batch data (run by :mod:`._schema`). Later versions' statements sit
beside the statements they change, in :mod:`._queries` and the other query modules.
"""

from __future__ import annotations

from . import _queries as q

__all__: list[str] = []  # imported as a module: ``from . import _schema_queries as sq``

#: Whether a table of this name is on the search path. Reading pg_class locks it, which takes
#: in the catalog changes committed since this transaction began (a migration another runner
#: committed while this one waited for the migration lock): to_regclass alone could answer
#: from a cache entry saying the table does not exist.
FIND_TABLE = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = to_regclass(%s))"
GET_VERSION = "SELECT version FROM trio_batch_schema"
SET_VERSION = (
    "INSERT INTO trio_batch_schema (singleton, version) VALUES (true, %s) "
    "ON CONFLICT (singleton) DO UPDATE SET version = excluded.version"
)

#: Version 1, in order. Times are double precision epoch seconds, as the Job dataclass holds.
CREATE_SCHEMA_V1 = (
    """CREATE TABLE trio_batch_schema (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        version integer NOT NULL
    )""",
    """CREATE TABLE runners (
        id text PRIMARY KEY,
        host text NOT NULL,
        pid integer NOT NULL,
        started_at timestamptz NOT NULL DEFAULT now(),
        heartbeat_at timestamptz NOT NULL DEFAULT now()
    )""",
    """CREATE TABLE jobs (
        id text PRIMARY KEY,
        status text NOT NULL CHECK (status IN
            ('queued', 'running', 'done', 'failed', 'partial', 'cancelled')),
        error text,
        targets_total integer NOT NULL,
        targets_done integer NOT NULL DEFAULT 0,
        targets_failed integer NOT NULL DEFAULT 0,
        caller text NOT NULL,
        caller_class text NOT NULL,
        idem_key text NOT NULL,
        results_size bigint NOT NULL DEFAULT 0,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        expires_at double precision NOT NULL,
        -- The runner draining the job; NULL for none (reaped, or made without a runner).
        owner text,
        -- The (caller, idem_key)'s current job: false once a newer job of the same key has
        -- replaced it after its lease lapsed (it stays, readable as lapsed, until purged).
        current boolean NOT NULL DEFAULT true
    )""",
    """CREATE TABLE targets (
        job_id text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        idx integer NOT NULL,
        url text NOT NULL,
        options text NOT NULL,
        status text NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
        result text,
        error text,
        hint text,
        finished_at double precision,
        attempts integer NOT NULL DEFAULT 0,
        PRIMARY KEY (job_id, idx)
    )""",
    # Idempotency: one current job per (caller, idem_key), the second line of defence behind
    # the creation lock, and the index of the reuse lookup. Not unique over all rows: lapsed
    # jobs (live ones included) stay until purged, and once a job's lease lapses a new job of
    # the same key replaces it as current.
    "CREATE UNIQUE INDEX jobs_idempotency ON jobs (caller, idem_key) WHERE current",
    # Live counts, per caller and in total.
    f"CREATE INDEX jobs_live ON jobs (caller) WHERE status IN {q.LIVE}",
    # Reaping and shutdown: a runner's live jobs.
    f"CREATE INDEX jobs_live_owner ON jobs (owner) WHERE status IN {q.LIVE}",
    # Retention: purge by lease, and list recent jobs.
    "CREATE INDEX jobs_expiry ON jobs (expires_at)",
)

#: Version 2, in order: ``targets.custom_id``, ``jobs.metadata`` (JSON text) and
#: ``jobs.parent_id``, the ``job_labels`` table and the indexes of a caller's filtered lists.
#: Jobs stored before version 2 have no metadata (``'{}'``), no parent and no labels.
MIGRATE_V2_BATCH_DATA = (
    "ALTER TABLE targets ADD COLUMN custom_id text",
    "ALTER TABLE jobs ADD COLUMN metadata text NOT NULL DEFAULT '{}', ADD COLUMN parent_id text",
    # A job's metadata again, one row per key: what a label filter (key = value) looks up.
    # caller and created_at are copied from the job so the filter index alone orders a page.
    """CREATE TABLE job_labels (
        job_id text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        caller text NOT NULL,
        key text NOT NULL,
        value text NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (job_id, key)
    )""",
    "CREATE INDEX job_labels_filter ON job_labels (caller, key, value, created_at, job_id)",
    # A caller's jobs newest first, with or without a status filter.
    "CREATE INDEX jobs_caller_created ON jobs (caller, created_at, id)",
    "CREATE INDEX jobs_caller_status_created ON jobs (caller, status, created_at, id)",
    # A parent's retries (a merged export).
    "CREATE INDEX jobs_parent ON jobs (parent_id, created_at) WHERE parent_id IS NOT NULL",
)
