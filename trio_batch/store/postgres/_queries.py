"""The SQL statements the PostgreSQL store runs, named; the outbox's are in
:mod:`._outbox_queries`, the per-host limits' in :mod:`._host_queries`, the submit's function
in :mod:`._create_queries`, the first schema versions' in :mod:`._schema_queries`, the live
jobs' tables and triggers in :mod:`._live_queries`.

All values are bound parameters (``%s`` / ``%(name)s``); no statement is built from values.
Lease times (``created_at``, ``updated_at``, ``expires_at``, ``finished_at``) are Unix epoch
seconds from the runner's clock, as with SQLite; runner liveness (``runners.heartbeat_at``) is
on the database's clock, the one clock every host shares.
"""

from __future__ import annotations

import re

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

#: An operation's bounds (milliseconds, as text) for the rest of its transaction, in one
#: statement: what a pipeline, one statement a message, sends instead of ``SET LOCAL``.
SET_BOUNDS = (
    "SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true), "
    "set_config('idle_in_transaction_session_timeout', %s, true)"
)
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
#: The runner's registration, share-locked until the end of the creating transaction: a reaper
#: deleting it waits, and then reaps the job created meanwhile with the runner's other jobs.
RUNNER_REGISTERED = "SELECT 1 FROM runners WHERE id = %s FOR SHARE"
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
#: (``RECORD_OUTCOME``'s ``told`` arm), a cancelled job's last outcome in flight included. No
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

#: The unexpired current job of (caller, idem_key): the idempotency lookup.
FIND_REUSABLE = (
    f"SELECT {JOB_COLUMNS} FROM {JOBS_NOW} AS jobs "
    "WHERE caller = %s AND idem_key = %s AND current AND expires_at > %s"
)
#: Before a new job of (caller, idem_key) is inserted: the lapsed one it replaces.
RETIRE_LAPSED = (
    "UPDATE jobs SET current = false "
    f"WHERE caller = %s AND idem_key = %s AND current AND {LEASE_NOW} <= %s"
)
#: What a submit is answered from before it takes the creation lock, in one snapshot: the job
#: to reuse (``FIND_REUSABLE``'s columns, NULLs if none), the caller's live jobs, all live jobs,
#: and the caller's newest live job (``NEWEST_LIVE_OF_CALLER``).
#: Live jobs in all; live is by status, not lease. The live counts read ``live_jobs`` (schema
#: v14), not ``jobs``: see ``_live_queries.MIGRATE_V14_LIVE_JOBS``.
COUNT_LIVE = "SELECT count(*) FROM live_jobs"
#: Live jobs of one caller.
COUNT_LIVE_OF_CALLER = "SELECT count(*) FROM live_jobs WHERE caller = %s"
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
#: A job's targets in one statement (one plan, not one per target): the job's id, their status,
#: then their URLs, options and custom ids as arrays, in ``idx`` order.
INSERT_TARGETS = (
    "INSERT INTO targets (job_id, idx, url, options, status, custom_id) "
    "SELECT %s, t.idx - 1, t.url, t.options, %s, t.custom_id "
    "FROM unnest(%s::text[], %s::text[], %s::text[]) "
    "WITH ORDINALITY AS t(url, options, custom_id, idx)"
)
INSERT_LABEL = (
    "INSERT INTO job_labels (job_id, caller, key, value, created_at) VALUES (%s, %s, %s, %s, %s)"
)

# ---------------------------------------------------------------------------------------------
# Writing outcomes and statuses


def final_status_case(total: str, failed: str) -> str:
    """SQL for :func:`trio_batch._model.final_status` of the SQL expressions ``total`` and
    ``failed`` (column expressions or placeholders, never values): ``done`` if none failed,
    ``failed`` if all failed, ``partial`` otherwise. A test ties it to ``final_status``."""
    return (
        f"CASE WHEN {failed} = 0 THEN 'done' WHEN {failed} >= {total} THEN 'failed' "
        "ELSE 'partial' END"
    )


#: Store one outcome in ONE statement (no savepoint, one round trip): the target, if it is still
#: pending and its job unexpired and still this runner's (fencing: a reaped job has lost its
#: owner); then the job's counts, results_size and lease, and its terminal status with its
#: last outcome if it is still live (a cancelled job stays cancelled). A refused write changes
#: nothing and raises nothing. One row, always: ``owned`` (the job is known, unexpired and
#: this runner's), then the job's columns after the write, or NULLs if nothing was stored.
#: So: a job row is success; owned without one, the target already has an outcome or does
#: not exist; not owned, the job is unknown, lapsed or not ours.
#:
#: ``job`` locks the job row first: under READ COMMITTED a lock that waited (on a concurrent
#: reap, cancel or forget) re-checks the conditions on the row as committed, so a reaped job
#: reads as not owned. Holding that lock, the job's UPDATEs see no one else's change. Each
#: arm names its row by key and checks the one before with ``EXISTS``, not ``IN``: a prepared
#: statement's generic plan (kept from its sixth run on) then reads every row through its
#: primary key, however small the tables were when it was made (the ``IN`` form's plan
#: scanned ``targets`` whole at each outcome).
#:
#: A live job's counts and lease are bumped in its narrow ``live_progress`` row (schema v15),
#: whose changed columns no index covers: the update is HOT, and a held xmin keeps a small
#: version of it, not of the wide ``jobs`` row. ``jobs`` is written by the outcome that ends the job
#: (its status, counts and lease, from the bumped live row), and by those of a job no longer
#: live (a cancelled job's last outcomes in flight), which has no live row.
#: The job's row, if it is unexpired and this runner's, locked (see ``RECORD_OUTCOME``).
_LOCKED_JOB = (
    "FROM jobs WHERE id = %(job_id)s AND owner IS NOT DISTINCT FROM %(runner)s "
    f"AND {LEASE_NOW} > %(now)s FOR NO KEY UPDATE OF jobs"
)
#: The target's outcome, if it is pending and the ``job`` arm's condition (SQL of ours) holds.
_STORE_TARGET = (
    "UPDATE targets SET status = %(status)s, result = %(result)s, error = %(error)s, "
    "hint = %(hint)s, finished_at = %(now)s, attempts = %(attempts)s "
    "WHERE job_id = %(job_id)s AND idx = %(idx)s AND status = 'pending' "
    "AND EXISTS (SELECT 1 FROM job{}) RETURNING job_id"
)
#: A live job's counts, results_size and lease, once the target is stored.
_PROGRESS = (
    "UPDATE live_progress SET targets_done = targets_done + 1, "
    "targets_failed = targets_failed + %(failed)s, "
    "results_size = results_size + %(size)s, updated_at = %(now)s, expires_at = %(expires)s "
    "WHERE job_id = %(job_id)s AND EXISTS (SELECT 1 FROM stored) "
    "RETURNING targets_done, targets_failed, results_size"
)


def _after(column: str, delta: str) -> str:
    """SQL for ``column`` of a job row after this outcome: the bumped live row's value, or,
    for a job with none (no longer live), the row's own plus ``delta``."""
    return f"coalesce((SELECT {column} FROM progressed), jobs.{column} + {delta})"


#: The job's row, where its live row does not hold the outcome alone: the outcome ends the
#: job, or the job has no live row.
_BUMP_JOB = (
    f"UPDATE jobs SET targets_done = {_after('targets_done', '1')}, "
    f"targets_failed = {_after('targets_failed', '%(failed)s')}, "
    f"results_size = {_after('results_size', '%(size)s')}, "
    "updated_at = %(now)s, expires_at = %(expires)s"
)
_BUMPED = (
    " WHERE id = %(job_id)s AND EXISTS (SELECT 1 FROM stored) "
    "AND coalesce((SELECT targets_done FROM progressed) >= jobs.targets_total, true) "
    f"RETURNING {JOB_COLUMNS}"
)
#: The job after the write: the bumped row, or the locked one with its live row's counts.
_ANSWER = (
    f"answer AS (SELECT {JOB_COLUMNS} FROM bumped UNION ALL "
    "SELECT j.id, j.status, j.error, j.targets_total, p.targets_done, p.targets_failed, "
    "j.caller, j.caller_class, j.idem_key, j.created_at, %(now)s, %(expires)s, j.metadata, "
    "j.parent_id FROM job AS j, progressed AS p WHERE NOT EXISTS (SELECT 1 FROM bumped)) "
)

#: The last outcome ended the job: tell the listening runners, at the commit, if one waits on
#: it (``WATCH_JOB``) or a runner that does not register its waits is registered. The answer's
#: ``WHERE`` reads this arm, so it runs (a CTE that nothing reads is never run).
_TELL_END = (
    f"SELECT pg_notify('{CHANNEL}', b.id) FROM bumped AS b, job "
    f"WHERE b.status NOT IN {LIVE} AND b.targets_done >= b.targets_total "
    "AND (job.waited OR EXISTS (SELECT 1 FROM runners WHERE NOT registers_waits))"
)

RECORD_OUTCOME = (
    f"WITH job AS (SELECT {JOB_COLUMNS}, waited {_LOCKED_JOB}), "
    f"stored AS ({_STORE_TARGET.format('')}), progressed AS ({_PROGRESS}), "
    f"bumped AS ({_BUMP_JOB}, "
    f"status = CASE WHEN status IN {LIVE} AND {_after('targets_done', '1')} >= targets_total "
    f"THEN {final_status_case('targets_total', _after('targets_failed', '%(failed)s'))} "
    f"ELSE status END{_BUMPED}"
    "), emitted AS ("
    # The last outcome made the job terminal: its event goes into the outbox with it.
    "UPDATE outbox SET event = 'job.' || b.status, job_status = b.status, job_error = b.error, "
    "job_metadata = b.metadata, "
    "targets_total = b.targets_total, targets_done = b.targets_done, "
    "targets_failed = b.targets_failed, event_at = %(now)s, round_from = %(now)s, "
    "due_at = %(now)s FROM bumped AS b WHERE outbox.job_id = %(job_id)s AND outbox.event IS NULL "
    f"AND b.status NOT IN {LIVE}"
    f"), told AS ({_TELL_END}), {_ANSWER}"
    "SELECT EXISTS (SELECT 1 FROM job), answer.* FROM (VALUES (1)) AS one "
    "LEFT JOIN answer ON true WHERE (SELECT count(*) FROM told) >= 0"
)
#: ``RECORD_OUTCOME``'s parameters and their types: the arguments of the function below.
_OUTCOME_ARGS = (
    ("job_id", "text"), ("idx", "integer"), ("now", "double precision"),
    ("expires", "double precision"), ("runner", "text"), ("status", "text"),
    ("result", "text"), ("error", "text"), ("hint", "text"), ("attempts", "integer"),
    ("failed", "integer"), ("size", "bigint"),
)  # fmt: skip
#: Version 6: ``RECORD_OUTCOME`` as a PL/pgSQL function, for connections through a pooler in
#: transaction mode, where no statement can stay prepared: parsing and planning the statement
#: each time cost twice what running it does, and a PL/pgSQL function's plan is kept by each
#: server connection, whichever client calls it. A change to ``RECORD_OUTCOME`` needs a
#: migration that runs this again (a test holds the statement's digest).
CREATE_RECORD_OUTCOME_FUNCTION = (
    "CREATE OR REPLACE FUNCTION trio_batch_record_outcome("
    + ", ".join(f"p_{name} {type_}" for name, type_ in _OUTCOME_ARGS)
    + ") RETURNS TABLE (owned boolean, id text, status text, error text, targets_total integer, "
    "targets_done integer, targets_failed integer, caller text, caller_class text, "
    "idem_key text, created_at double precision, updated_at double precision, "
    "expires_at double precision, metadata text, parent_id text) "
    # The table's columns win over the output columns of the same names.
    "LANGUAGE plpgsql AS $body$ #variable_conflict use_column\nBEGIN RETURN QUERY "
    + re.sub(r"%\((\w+)\)s", r"p_\1", RECORD_OUTCOME)
    + "; END $body$"
)
#: Version 12: waits registered, so that a job's end is notified only if a runner waits on
#: it elsewhere (``WATCH_JOB``, ``RECORD_OUTCOME``); the outcome's function made again.
MIGRATE_V12_WAITS = (
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false",
    "ALTER TABLE runners ADD COLUMN IF NOT EXISTS registers_waits boolean NOT NULL DEFAULT false",
    CREATE_RECORD_OUTCOME_FUNCTION,
)

#: ``RECORD_OUTCOME`` through that function: the same parameters, the same one row. Each cast
#: to its argument's type, so a value out of its range is refused as by the statement itself.
RECORD_OUTCOME_CALL = (
    "SELECT * FROM trio_batch_record_outcome("
    + ", ".join(f"%({name})s::{type_}" for name, type_ in _OUTCOME_ARGS)
    + ")"
)
#: A target's stored outcome, to recognise a retried write whose first attempt committed.
GET_OUTCOME = "SELECT status, result, error, hint FROM targets WHERE job_id = %s AND idx = %s"
#: Move a live, unexpired job to a terminal status, once (any runner: a cancel comes from
#: wherever the user is; a reaped job is terminal already, so this cannot touch it).
FINISH_JOB = (
    "UPDATE jobs SET status = %s, error = %s, updated_at = %s "
    f"WHERE id = %s AND status IN {LIVE} AND {LEASE_NOW} > %s "
    f"RETURNING {JOB_COLUMNS}"
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
    "custom_id, coalesce(length(result), 0) FROM targets WHERE job_id = %s ORDER BY idx"
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
