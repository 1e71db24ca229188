"""The SQL statements the PostgreSQL store runs, named; the outbox's are in
:mod:`._outbox_queries`, the per-host limits' in :mod:`._host_queries`, the submit's function
in :mod:`._create_queries`, the first schema versions' in :mod:`._schema_queries`, the live
jobs' tables and triggers in :mod:`._live_queries`, the outcome writes' and the terminal
statuses' in :mod:`._outcome_queries`.

All values are bound parameters (``%s`` / ``%(name)s``); no statement is built from values.
Lease times (``created_at``, ``updated_at``, ``expires_at``, ``finished_at``) are Unix epoch
seconds from the runner's clock, as with SQLite; runner liveness (``runners.heartbeat_at``) is
on the database's clock, the one clock every host shares.
"""

from __future__ import annotations

__all__: list[str] = []  # imported as a module: ``from . import _queries as q``

# Column order matches the Job dataclass, so a row maps to Job(*row).
JOB_COLUMNS = (
    "id, status, error, targets_total, targets_done, targets_failed, caller, caller_class, "
    "idem_key, created_at, updated_at, expires_at, metadata, parent_id"
)
TARGET_COLUMNS = "idx, url, status, result, error, hint, options, finished_at, attempts, custom_id"

#: The live statuses, as SQL.
LIVE = "('queued', 'running')"

#: What every outcome changes, kept in a live job's ``live_progress`` row (schema v15) and in
#: its ``jobs`` row once it ends (see ``_live_queries.MIGRATE_V15_PROGRESS``).
PROGRESS = ("targets_done", "targets_failed", "results_size", "updated_at", "expires_at")
#: ``jobs`` as it stands, to read FROM in its place (``{JOBS_NOW} AS jobs``): a live job's
#: progress and lease from its ``live_progress`` row, every other column from ``jobs``. The
#: planner inlines it: a read still reaches ``jobs`` through its indexes, and each row's live
#: one through the key. Not for ``FOR UPDATE`` (the live side is nullable): lock ``jobs``.
JOBS_NOW = (
    "(SELECT j.id, j.status, j.error, j.targets_total, j.caller, j.caller_class, j.idem_key, "
    "j.created_at, j.metadata, j.parent_id, j.owner, j.current, j.waited, "
    "j.terminal_expires_at, j.trace_context, "
    + ", ".join(f"coalesce(l.{c}, j.{c}) AS {c}" for c in PROGRESS)
    + " FROM jobs AS j LEFT JOIN live_progress AS l ON l.job_id = j.id)"
)
#: A job's lease as it stands, as SQL on a ``jobs`` row (for an UPDATE of ``jobs``).
LEASE_NOW = (
    "coalesce((SELECT l.expires_at FROM live_progress AS l WHERE l.job_id = jobs.id), "
    "jobs.expires_at)"
)

# ---------------------------------------------------------------------------------------------
# Advisory locks: (trio_batch's class id, which lock). The class id is "tb" in ASCII.

LOCK_CLASS = 0x7462
LOCK_MIGRATE = 1
LOCK_CREATE = 2
LOCK_REAP = 3

#: Wait for a lock held until the transaction ends (bounded by lock_timeout): LOCK_CREATE, for
#: one caps check and insert at a time; LOCK_MIGRATE, for one schema migration at a time. No
#: session locks: a pooler may hand the next transaction to another server connection.
XACT_LOCK = "SELECT pg_advisory_xact_lock(%s, %s)"
#: True if this transaction now holds the reaper's lock; False at once if another has it.
TRY_LOCK_REAPER = "SELECT pg_try_advisory_xact_lock(%s, %s)"

#: The server process serving this statement: through a pooler, not the one libpq was told of.
BACKEND_PID = "SELECT pg_backend_pid()"

#: The channel on which runners tell each other of jobs they changed (see ``_listen``).
CHANNEL = "trio_batch"

# ---------------------------------------------------------------------------------------------
# Runners

#: Registers its waits on other runners' jobs (``WATCH_JOB``, v12): a runner that does not
#: (one of an older version, during a rolling upgrade) is notified of every job's end.
REGISTER_RUNNER = "INSERT INTO runners (id, host, pid, registers_waits) VALUES (%s, %s, %s, true)"
#: Returns the row if the runner is still registered (not reaped).
HEARTBEAT = "UPDATE runners SET heartbeat_at = now() WHERE id = %s RETURNING id"
#: The payload that tells of a runner gone: this, then its id (a job id has no colon).
RUNNER_GONE = "runner:"
#: Remove a runner's registration (at its shutdown), telling the listening runners: a job it
#: leaves terminal but owned (a cancelled job's last fetch cut off, a release that failed)
#: has its drain over now, and a wait on it elsewhere reads it again.
UNREGISTER_RUNNER = (
    "WITH gone AS (DELETE FROM runners WHERE id = %s RETURNING id) "
    f"SELECT pg_notify('{CHANNEL}', '{RUNNER_GONE}' || id) FROM gone"
)
#: Runners silent for longer than the timeout (seconds), removed and told of as gone (see
#: ``UNREGISTER_RUNNER``).
DELETE_SILENT_RUNNERS = (
    "WITH gone AS (DELETE FROM runners WHERE heartbeat_at < now() - make_interval(secs => %s) "
    f"RETURNING id) SELECT id, pg_notify('{CHANNEL}', '{RUNNER_GONE}' || id) FROM gone"
)
#: Whether a job's end (or its drain's) is told (``pg_notify``) to the listening runners, as SQL
#: on a row with a ``waited`` column: a runner waits on it elsewhere (``WATCH_JOB``), or a
#: runner that does not register its waits is registered (it waits on every end).
_TOLD = "(waited OR EXISTS (SELECT 1 FROM runners WHERE NOT registers_waits))"


def _tell(rows: str) -> str:
    """A CTE body notifying the ids of ``rows`` (a CTE of ours with ``id`` and ``waited``)
    that are ``_TOLD``; the statement must read it, or it is not run."""
    return f"SELECT pg_notify('{CHANNEL}', id) FROM {rows} WHERE {_TOLD}"


#: Fail the live jobs that no registered runner drains (their runner was reaped, shut down
#: without marking them, or there never was one); they lose their owner, which fences them.
#: ``updated_at``: the caller's time, or the database's clock when None. The waited ones are
#: told (their waiters elsewhere see the drain over at once).
REAP_ORPHANED_JOBS = (
    "WITH reaped AS (UPDATE jobs SET status = 'failed', error = %s, owner = NULL, "
    "updated_at = coalesce(%s, extract(epoch FROM now())) "
    f"WHERE status IN {LIVE} AND (owner IS NULL OR NOT EXISTS "
    "(SELECT 1 FROM runners WHERE runners.id = jobs.owner)) "
    f"RETURNING id, trace_context, waited), told AS ({_tell('reaped')}) "
    "SELECT id, trace_context FROM reaped WHERE (SELECT count(*) FROM told) >= 0"
)
#: Fail one runner's own live jobs (shutdown: its drains have stopped) and drop them, so
#: waiters elsewhere, told if ``_TOLD``, see the drain over. NULL matches NULL: a store with
#: no runner fails the jobs that have none.
FAIL_OWN_JOBS = (
    "WITH failed AS (UPDATE jobs SET status = 'failed', error = %s, updated_at = %s, "
    f"owner = NULL WHERE status IN {LIVE} AND owner IS NOT DISTINCT FROM %s "
    f"RETURNING id, waited), told AS ({_tell('failed')}) "
    "SELECT id FROM failed WHERE (SELECT count(*) FROM told) >= 0"
)

#: Of the jobs a runner drains (``id = ANY``): the cancelled ones, and those it no longer owns
#: (reaped). Columns: id, cancelled, still owned.
DRAIN_CHANGES = (
    "SELECT id, status = 'cancelled', owner IS NOT DISTINCT FROM %(runner)s FROM jobs "
    "WHERE id = ANY(%(ids)s) AND (status = 'cancelled' OR owner IS DISTINCT FROM %(runner)s)"
)
#: Live, unexpired jobs a runner owns with no outcome yet, but that it does not drain (not one
#: of ids, an anti-join): creates whose answer was lost. Oldest first, at most limit.
UNDRAINED_JOBS = (
    f"SELECT {JOB_COLUMNS} FROM {JOBS_NOW} AS jobs WHERE status IN {LIVE} "
    "AND owner = %(runner)s AND targets_done = 0 AND expires_at > %(now)s "
    "AND id NOT IN (SELECT unnest(%(ids)s::text[])) ORDER BY created_at, id LIMIT %(limit)s"
)
#: Those jobs' targets, in order, as a drain takes them.
UNDRAINED_TARGETS = (
    "SELECT job_id, url, options, custom_id FROM targets WHERE job_id = ANY(%s) "
    "ORDER BY job_id, idx"
)
#: A runner's drain of a terminal job stopped: it drops the job, so waiters elsewhere (told
#: if ``_TOLD``) know no outcome can follow.
RELEASE_JOB = (
    f"WITH released AS (UPDATE jobs SET owner = NULL WHERE id = %s AND owner = %s "
    f"AND status NOT IN {LIVE} RETURNING id, waited), told AS ({_tell('released')}) "
    "SELECT count(*) FROM told"
)
#: Tell the runners listening on the channel (first parameter) that these jobs (second, an
#: array of ids, one notification each) changed. Delivered when the transaction commits.
NOTIFY_JOBS = "SELECT pg_notify(%s, job_id) FROM unnest(%s::text[]) AS job_id"
#: Start receiving the notifications of a channel (an identifier: quoted by psycopg.sql).
LISTEN = "LISTEN {}"
#: A job an outcome may still come to, as SQL on its row: not every target stored, and live
#: or still owned (a terminal job's drain may be storing its last outcomes in flight).
_DRAINING = f"targets_done < targets_total AND (status IN {LIVE} OR owner IS NOT NULL)"
#: A runner waits on this job, which another runner drains: the outcome that ends it notifies
#: (``RECORD_OUTCOMES``'s ``told`` arm), a cancelled job's last outcome in flight included. No
#: row: every outcome is stored (or the job is unknown), so it may have ended before the mark;
#: read it again. Locking the row orders the mark against the ending outcome's own lock:
#: whichever comes second sees the other's change. A job marked already is not written again
#: (many waits on one job would each lock and rewrite the row its drain bumps at every
#: outcome): a committed mark preceded any end that could miss it, so the snapshot's answer
#: holds (false only if the snapshot saw every outcome stored, or a mark not yet committed:
#: the wait reads the job again, and asks again). A terminal job without an owner is over
#: too (released, reaped, failed at its runner's shutdown): those writes lock the row, and
#: change the columns this reads, so a mark that waited for them sees them.
WATCH_JOB = (
    "WITH marked AS (UPDATE jobs SET waited = true WHERE id = %(id)s "
    f"AND {_DRAINING} AND NOT waited RETURNING id) "
    "SELECT EXISTS (SELECT 1 FROM marked) OR EXISTS (SELECT 1 FROM jobs WHERE id = %(id)s "
    f"AND {_DRAINING} AND waited)"
)
#: No runner but the asking one may still write an outcome of the job: it has none, or the
#: asking one, or its runner is gone, or every target is stored. No row: unknown job (not
#: over: the caller reads it again, and finds it gone).
DRAIN_OVER = (
    "SELECT owner IS NULL OR owner = %s OR targets_done >= targets_total "
    "OR NOT EXISTS (SELECT 1 FROM runners WHERE runners.id = jobs.owner) "
    "FROM jobs WHERE id = %s"
)

# ---------------------------------------------------------------------------------------------
# Creating jobs

#: What a submit is answered from before it takes the creation lock, in one snapshot: the
#: unexpired current job of (caller, idem_key) to reuse (NULLs if none), the caller's live
#: jobs, all live jobs, and the caller's newest live job. Live is by status, not lease; the
#: counts read ``live_jobs`` (schema v14), not ``jobs``: see
#: ``_live_queries.MIGRATE_V14_LIVE_JOBS``. The submit's function (:mod:`._create_queries`)
#: runs it, and then the job's inserts.
ADMISSION = (
    "SELECT reusable.*, "
    "(SELECT count(*) FROM live_jobs WHERE caller = %(caller)s), "
    "(SELECT count(*) FROM live_jobs), "
    "(SELECT job_id FROM live_jobs WHERE caller = %(caller)s "
    "ORDER BY created_at DESC LIMIT 1) "
    f"FROM (VALUES (1)) AS one LEFT JOIN (SELECT {JOB_COLUMNS} FROM {JOBS_NOW} AS jobs "
    "WHERE caller = %(caller)s AND idem_key = %(key)s AND current AND expires_at > %(now)s) "
    "AS reusable ON true"
)
#: How many columns of an ``ADMISSION`` row are the reusable job's.
ADMISSION_JOB_COLUMNS = JOB_COLUMNS.count(",") + 1
INSERT_JOB = (
    f"INSERT INTO jobs ({JOB_COLUMNS}, trace_context, owner) VALUES ({', '.join(['%s'] * 16)})"
)

# ---------------------------------------------------------------------------------------------
# Retention

#: Delete one batch of lapsed jobs (their targets go by the cascade), oldest lease first: of
#: the terminal ones through their index, of the live ones by a scan of ``live_progress``
#: (schema v15: a live job's lease is there, bumped at each outcome, so no index covers it;
#: the caps keep those rows few, and a job's row leaves the table when the job ends).
#: SKIP LOCKED: runners purging at once take different rows instead of waiting on each other.
PURGE_LAPSED = (
    "WITH terminal AS (SELECT id, expires_at FROM jobs WHERE terminal_expires_at <= %(now)s "
    "ORDER BY terminal_expires_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
    "live AS (SELECT j.id, l.expires_at FROM live_progress AS l "
    "JOIN jobs AS j ON j.id = l.job_id "
    "WHERE l.expires_at <= %(now)s ORDER BY l.expires_at LIMIT %(limit)s "
    "FOR UPDATE OF j SKIP LOCKED) "
    "DELETE FROM jobs WHERE id IN (SELECT id FROM (SELECT * FROM terminal UNION ALL "
    "SELECT * FROM live) AS lapsed ORDER BY expires_at LIMIT %(limit)s)"
)

# ---------------------------------------------------------------------------------------------
# Reading

GET_JOB = f"SELECT {JOB_COLUMNS} FROM {JOBS_NOW} AS jobs WHERE id = %s AND expires_at > %s"
GET_TARGETS = f"SELECT {TARGET_COLUMNS} FROM targets WHERE job_id = %s ORDER BY idx"


def _newest_lease_first(where: str) -> str:
    """Unexpired jobs matching ``where`` (SQL of our own, values bound), the latest lease
    first, ``%(limit)s`` of them: the terminal ones through their lease's index, the live ones
    (few) through ``jobs_live`` (schema v7: ``expires_at`` has no index), their leases in
    their ``live_progress`` rows (schema v15)."""
    return (
        f"SELECT {JOB_COLUMNS} FROM ((SELECT {JOB_COLUMNS} FROM jobs WHERE {where} "
        "terminal_expires_at > %(now)s ORDER BY terminal_expires_at DESC LIMIT %(limit)s) "
        f"UNION ALL (SELECT {JOB_COLUMNS} FROM {JOBS_NOW} AS jobs WHERE {where} "
        f"status IN {LIVE} "
        "AND expires_at > %(now)s ORDER BY expires_at DESC LIMIT %(limit)s)) AS unexpired "
        "ORDER BY expires_at DESC LIMIT %(limit)s"
    )


LIST_JOBS = _newest_lease_first("")
LIST_JOBS_OF_CALLER = _newest_lease_first("caller = %(caller)s AND")
#: Unexpired jobs by status with their targets' totals, for metrics: the live ones (few: the
#: caps bound them; read from their ``live_progress`` rows) and the terminal ones (all the
#: rest; the store caches their counts, see PostgresReads.counts). Columns: status, jobs,
#: targets, done, failed.
COUNT_LIVE_BY_STATUS = (
    "SELECT j.status, count(*), sum(j.targets_total), sum(l.targets_done), "
    "sum(l.targets_failed) FROM live_progress AS l JOIN jobs AS j ON j.id = l.job_id "
    f"WHERE j.status IN {LIVE} AND l.expires_at > %s GROUP BY j.status"
)
COUNT_TERMINAL_BY_STATUS = (
    "SELECT status, count(*), sum(targets_total), sum(targets_done), sum(targets_failed) "
    "FROM jobs WHERE terminal_expires_at > %s GROUP BY status"
)
#: A job's targets without their results, and each result's size (characters), last.
GET_TARGETS_WITHOUT_RESULTS = (
    "SELECT idx, url, status, NULL, error, hint, options, finished_at, attempts, "
    "custom_id, coalesce(result_size, length(result), 0) FROM targets WHERE job_id = %s "
    "ORDER BY idx"
)
GET_ONE_TARGET = f"SELECT {TARGET_COLUMNS} FROM targets WHERE job_id = %s AND idx = %s"
#: A job's columns one by one, for the filtered lists (see store/_filters.py).
JOB_COLUMN_NAMES = tuple(name.strip() for name in JOB_COLUMNS.split(","))
#: The newest unexpired retry of a job by the same caller (a merged export).
LATEST_RETRY = (
    f"SELECT {JOB_COLUMNS} FROM {JOBS_NOW} AS jobs WHERE parent_id = %s AND caller = %s "
    "AND expires_at > %s ORDER BY created_at DESC LIMIT 1"
)
#: A job to forget, locked against a concurrent outcome write or cancel.
GET_JOB_FOR_UPDATE = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = %s AND {LEASE_NOW} > %s FOR UPDATE OF jobs"
)
#: Forget a terminal job (its targets go with it: ON DELETE CASCADE); a wait on it elsewhere
#: (a cancelled job's last outcome in flight) is told.
FORGET_JOB = (
    f"WITH gone AS (DELETE FROM jobs WHERE id = %s AND status NOT IN {LIVE} "
    f"RETURNING id, waited), told AS ({_tell('gone')}) SELECT count(*) FROM told"
)

#: Version 4: the job's trace context (a W3C traceparent), NULL when it was not traced.
ADD_TRACE_CONTEXT = "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS trace_context text"

#: Version 7: a terminal job's lease again, in a column of its own (NULL while the job is
#: live) indexed in place of ``expires_at``. Every outcome moves ``expires_at``: indexed, each
#: outcome's update of the job wrote an entry into every index of ``jobs``; unindexed, the
#: update is HOT (no index touched) until the one that ends the job. Live jobs, which the caps
#: keep few, are found through ``jobs_live`` instead. The column is generated, so no statement
#: can let it disagree with the status and lease it is made of.
MIGRATE_V7_TERMINAL_LEASE = (
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS terminal_expires_at double precision "
    "GENERATED ALWAYS AS "
    f"(CASE WHEN status IN {LIVE} THEN NULL ELSE expires_at END) STORED",
    "CREATE INDEX IF NOT EXISTS jobs_terminal_expiry ON jobs (terminal_expires_at) "
    "WHERE terminal_expires_at IS NOT NULL",
    "DROP INDEX IF EXISTS jobs_expiry",
)


#: A job's unexpired retries by the same caller, newest first (a merged export's overlays).
RETRIES = (
    f"SELECT {JOB_COLUMNS} FROM {JOBS_NOW} AS jobs WHERE parent_id = %s AND caller = %s "
    "AND expires_at > %s ORDER BY created_at DESC, id DESC LIMIT %s"
)
