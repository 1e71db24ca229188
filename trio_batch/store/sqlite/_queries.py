"""Every SQL statement the SQLite store runs, named, in one place.

All values are bound parameters (``?``); the few statements built with a format string only
take names and numbers validated where they are built.
"""

from __future__ import annotations

__all__: list[str] = []  # imported as a module: ``from . import _queries as q``

# Column order matches the Job dataclass, so a row maps to Job(*row).
JOB_COLUMNS = (
    "id, status, error, targets_total, targets_done, targets_failed, caller, caller_class, "
    "idem_key, created_at, updated_at, expires_at, metadata, parent_id"
)
TARGET_COLUMNS = "idx, url, status, result, error, hint, options, finished_at, attempts, custom_id"

# ---------------------------------------------------------------------------------------------
# Creating jobs

#: The newest unexpired job of (caller, idem_key): the idempotency lookup.
FIND_REUSABLE = (
    f"SELECT {JOB_COLUMNS} FROM jobs "
    "WHERE caller = ? AND idem_key = ? AND expires_at > ? "
    "ORDER BY expires_at DESC LIMIT 1"
)
#: What a submit needs to know before it writes, in one statement (one snapshot): the job to
#: reuse (FIND_REUSABLE's; an aggregate's bare columns come from the row ``max`` picks, NULLs
#: if none), its lease, then the caps' verdict (``?4`` jobs per caller, ``?5`` in all), each
#: count read only if the one before did not refuse: the caller's newest live job if the
#: caller is at its cap (text, ``''`` if it has none: ``max`` again, through the live-jobs
#: index alone), NULL if all jobs are, else the connection's data version as of this read's
#: snapshot (an integer; see Store.create_job), read only for a row that admits.
ADMISSION = (
    f"SELECT {JOB_COLUMNS}, max(expires_at), CASE "
    "WHEN (SELECT count(*) FROM jobs WHERE status IN ('queued', 'running') AND caller = ?1) "
    ">= ?4 THEN coalesce((SELECT id FROM (SELECT id, max(created_at) FROM jobs "
    "WHERE caller = ?1 AND status IN ('queued', 'running'))), '') "
    "WHEN (SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')) >= ?5 THEN NULL "
    "ELSE (SELECT data_version FROM pragma_data_version) END "
    "FROM jobs WHERE caller = ?1 AND idem_key = ?2 AND expires_at > ?3"
)
#: Commits by other connections since this one opened; see create_job.
DATA_VERSION = "PRAGMA data_version"
#: Live jobs in all; live is by status, not lease.
COUNT_LIVE = "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
#: Live jobs of one caller.
COUNT_LIVE_OF_CALLER = (
    "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running') AND caller = ?"
)
INSERT_JOB = f"INSERT INTO jobs ({JOB_COLUMNS}, trace_context) VALUES ({', '.join('?' * 15)})"
INSERT_TARGET = (
    "INSERT INTO targets (job_id, idx, url, options, status, custom_id) VALUES (?, ?, ?, ?, ?, ?)"
)
#: A job's targets when none has options or a custom id, all ``pending`` (``'{}'`` is how
#: unset options are stored), from a JSON array of their URLs: one statement for them all,
#: whatever their number, which executemany of INSERT_TARGET takes about twice as long over.
INSERT_PLAIN_TARGETS = (
    "INSERT INTO targets (job_id, idx, url, options, status, custom_id) "
    "SELECT ?1, key, value, '{}', 'pending', NULL FROM json_each(?2)"
)
INSERT_LABEL = (
    "INSERT INTO job_labels (job_id, caller, key, value, created_at) VALUES (?, ?, ?, ?, ?)"
)

# ---------------------------------------------------------------------------------------------
# Writing outcomes and statuses

#: Count one outcome into its unexpired job and bump the lease; returns the job.
BUMP_JOB = (
    "UPDATE jobs SET targets_done = targets_done + 1, "
    "targets_failed = targets_failed + ?, results_size = results_size + ?, "
    "updated_at = ?, expires_at = ? "
    f"WHERE id = ? AND expires_at > ? RETURNING {JOB_COLUMNS}"
)
#: The terminal status set with a job's last outcome (same transaction).
SET_STATUS = "UPDATE jobs SET status = ? WHERE id = ?"
#: Store one outcome; never overwrites one (only a pending target matches).
STORE_OUTCOME = (
    "UPDATE targets SET status = ?1, result = ?2, error = ?3, hint = ?4, finished_at = ?5, "
    "attempts = ?6, result_size = ?9 WHERE job_id = ?7 AND idx = ?8 AND status = 'pending' "
    "AND EXISTS (SELECT 1 FROM jobs WHERE id = ?7 AND expires_at > ?5)"
)
#: Move a live, unexpired job to a terminal status, once.
FINISH_JOB = (
    "UPDATE jobs SET status = ?, error = ?, updated_at = ? "
    "WHERE id = ? AND status IN ('queued', 'running') AND expires_at > ? "
    f"RETURNING {JOB_COLUMNS}"
)
#: Fail every live job (a restart or a shutdown).
FAIL_LIVE = (
    "UPDATE jobs SET status = 'failed', error = ?, updated_at = ? "
    "WHERE status IN ('queued', 'running') RETURNING id, trace_context"
)

# ---------------------------------------------------------------------------------------------
# Retention

#: One batch of lapsed jobs, oldest lease first.
LAPSED_IDS = "SELECT id FROM jobs WHERE expires_at <= ? ORDER BY expires_at LIMIT ?"
#: Delete the targets, then the jobs, of a JSON array of job ids.
DELETE_TARGETS_OF = "DELETE FROM targets WHERE job_id IN (SELECT value FROM json_each(?))"
DELETE_LABELS_OF = "DELETE FROM job_labels WHERE job_id IN (SELECT value FROM json_each(?))"
DELETE_JOBS = "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?))"

#: Forget one terminal job: its targets, then the job itself (live jobs never match).
FORGET_TARGETS = "DELETE FROM targets WHERE job_id = ?"
FORGET_LABELS = "DELETE FROM job_labels WHERE job_id = ?"
FORGET_JOB = "DELETE FROM jobs WHERE id = ? AND status NOT IN ('queued', 'running')"

# ---------------------------------------------------------------------------------------------
# Reading

GET_JOB = f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ? AND expires_at > ?"
#: A job and, last, the characters of results it holds (a status read checks that first).
GET_JOB_AND_RESULTS_SIZE = (
    f"SELECT {JOB_COLUMNS}, results_size FROM jobs WHERE id = ? AND expires_at > ?"
)
GET_TARGETS = f"SELECT {TARGET_COLUMNS} FROM targets WHERE job_id = ? ORDER BY idx"
#: The targets with NULL for each result, and the result's size in characters last.
GET_TARGETS_WITHOUT_RESULTS = (
    "SELECT idx, url, status, NULL, error, hint, options, finished_at, attempts, "
    "custom_id, coalesce(result_size, length(result), 0) FROM targets WHERE job_id = ? "
    "ORDER BY idx"
)
GET_ONE_TARGET = f"SELECT {TARGET_COLUMNS} FROM targets WHERE job_id = ? AND idx = ?"
#: A job's columns one by one, for the filtered lists (see store/_filters.py).
JOB_COLUMN_NAMES = tuple(name.strip() for name in JOB_COLUMNS.split(","))
#: The newest unexpired retry of a job by the same caller (a merged export).
LATEST_RETRY = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE parent_id = ? AND caller = ? "
    "AND expires_at > ? ORDER BY created_at DESC LIMIT 1"
)
LIST_JOBS = f"SELECT {JOB_COLUMNS} FROM jobs WHERE expires_at > ? ORDER BY expires_at DESC LIMIT ?"
LIST_JOBS_OF_CALLER = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE caller = ? AND expires_at > ? "
    "ORDER BY expires_at DESC LIMIT ?"
)
#: Unexpired jobs by status, for metrics.
COUNT_BY_STATUS = "SELECT status, count(*) FROM jobs WHERE expires_at > ? GROUP BY status"
#: Unexpired jobs' target totals, for metrics; the last column counts the targets that terminal
#: jobs left without an outcome (they never run).
SUM_TARGETS = (
    "SELECT coalesce(sum(targets_total), 0), coalesce(sum(targets_done), 0), "
    "coalesce(sum(targets_failed), 0), "
    "coalesce(sum(CASE WHEN status IN ('queued', 'running') THEN 0 "
    "ELSE targets_total - targets_done END), 0) FROM jobs WHERE expires_at > ?"
)

# ---------------------------------------------------------------------------------------------
# Migrations

#: Version 2: every outcome stored before retries existed took one attempt.
MIGRATE_V2_ATTEMPTS = "UPDATE targets SET attempts = 1 WHERE status != 'pending'"

#: Version 3, in order: custom ids, metadata, parents, labels, and the filtered lists' indexes.
MIGRATE_V3_BATCH_DATA = (
    "ALTER TABLE targets ADD COLUMN custom_id TEXT",
    "ALTER TABLE jobs ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'",
    "ALTER TABLE jobs ADD COLUMN parent_id TEXT",
    # A job's metadata again, one row per key: what a label filter (key = value) looks up.
    # caller and created_at are copied from the job so the filter index alone orders a page.
    """CREATE TABLE job_labels (
        job_id TEXT NOT NULL REFERENCES jobs (id),
        caller TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (job_id, key)
    ) STRICT, WITHOUT ROWID""",
    "CREATE INDEX job_labels_filter ON job_labels (caller, key, value, created_at, job_id)",
    # A caller's jobs newest first, with or without a status filter.
    "CREATE INDEX jobs_caller_created ON jobs (caller, created_at, id)",
    "CREATE INDEX jobs_caller_status_created ON jobs (caller, status, created_at, id)",
    # A parent's retries (a merged export).
    "CREATE INDEX jobs_parent ON jobs (parent_id, created_at) WHERE parent_id IS NOT NULL",
)
#: Version 5: the job's trace context (a W3C traceparent), NULL when it was not traced.
ADD_TRACE_CONTEXT = "ALTER TABLE jobs ADD COLUMN trace_context TEXT"
#: Version 6: a stored result's size in characters, written with it (NULL on rows stored
#: before, sized by ``length(result)``, which reads the whole value).
ADD_RESULT_SIZE = "ALTER TABLE targets ADD COLUMN result_size INTEGER"

# ---------------------------------------------------------------------------------------------
# The outbox: jobs' terminal events and their deliveries (version 4)

CREATE_OUTBOX = (
    """CREATE TABLE outbox (
        job_id TEXT PRIMARY KEY,
        event_id TEXT NOT NULL,
        url TEXT,
        callback INTEGER NOT NULL DEFAULT 0,
        event TEXT,
        job_status TEXT,
        job_error TEXT,
        job_metadata TEXT,
        targets_total INTEGER,
        targets_done INTEGER,
        targets_failed INTEGER,
        event_at REAL,
        round_from REAL,
        due_at REAL,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_answer TEXT,
        last_attempt_at REAL,
        delivered_at REAL,
        gave_up_at REAL,
        lease_owner TEXT,
        lease_until REAL
    ) STRICT""",
    # The deliveries due: only rows waiting for an attempt are in it.
    "CREATE INDEX outbox_due ON outbox (due_at) WHERE due_at IS NOT NULL",
)
#: A new job that is to tell of its end.
INSERT_OUTBOX = "INSERT INTO outbox (job_id, event_id, url, callback) VALUES (?, ?, ?, ?)"
_EMIT = (
    "UPDATE outbox SET event = 'job.' || j.status, job_status = j.status, job_error = j.error, "
    "job_metadata = j.metadata, "
    "targets_total = j.targets_total, targets_done = j.targets_done, "
    "targets_failed = j.targets_failed, event_at = ?, round_from = ?, due_at = ? "
    "FROM jobs AS j WHERE outbox.job_id = j.id AND outbox.event IS NULL "
    "AND j.status NOT IN ('queued', 'running') AND j.id "
)
#: The terminal event of one job whose status has just become terminal (same transaction);
#: a job without an outbox row, or whose event was written already, is not touched.
EMIT_EVENT = _EMIT + "= ?"
#: The same for a JSON array of job ids.
EMIT_EVENTS = _EMIT + "IN (SELECT value FROM json_each(?))"
EVENT_COLUMNS = (
    "event_id, event, job_id, job_status, job_error, targets_total, targets_done, "
    "targets_failed, event_at, url, callback, attempts, round_from, job_metadata"
)
#: Lease the delivery due first that no live delivery holds (a lease of another owner is a
#: dead process's: one runner per SQLite database).
CLAIM_DELIVERY = (
    "UPDATE outbox SET lease_owner = ?, lease_until = ? WHERE job_id = ("
    "SELECT job_id FROM outbox WHERE due_at <= ? "
    "AND (lease_until IS NULL OR lease_until <= ? OR lease_owner != ?) "
    "AND (url IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(?) WHERE url = value "
    "OR substr(url, 1, length(value) + 1) IN (value || '/', value || '?', value || '#'))) "
    f"ORDER BY due_at LIMIT 1) RETURNING {EVENT_COLUMNS}, "
    "(SELECT trace_context FROM jobs WHERE jobs.id = outbox.job_id)"
)
#: One attempt's answer, if the lease is still the writer's; ``due_at`` NULL ends the round.
#: A failure claimed in an earlier round (a redelivery joined the attempt) counts nothing and
#: leaves the new round due as the redelivery set it: its schedule was the old round's.
RECORD_DELIVERY = (
    "UPDATE outbox SET "
    "attempts = attempts + CASE WHEN :delivered_at IS NOT NULL OR round_from = :round_from "
    "THEN 1 ELSE 0 END, "
    "last_answer = :answer, last_attempt_at = :now, "
    "delivered_at = coalesce(:delivered_at, delivered_at), "
    "due_at = CASE WHEN :delivered_at IS NOT NULL OR round_from = :round_from "
    "THEN :due ELSE due_at END, "
    "gave_up_at = CASE WHEN :delivered_at IS NOT NULL OR round_from = :round_from "
    "THEN :gave_up END, "
    "lease_owner = NULL, lease_until = NULL "
    "WHERE job_id = :job_id AND event_id = :event_id AND lease_owner = :owner"
)
DELIVERY_COLUMNS = (
    "o.event_id, o.url, o.event, o.attempts, o.last_answer, o.last_attempt_at, "
    "o.delivered_at, o.due_at, o.gave_up_at"
)
#: The delivery state of an unexpired job's event.
GET_DELIVERY = (
    f"SELECT {DELIVERY_COLUMNS} FROM outbox AS o JOIN jobs AS j ON j.id = o.job_id "
    "WHERE o.job_id = ? AND j.expires_at > ?"
)
#: A new round of attempts for an unexpired job's written event. An attempt in flight (a
#: lease that holds) keeps its lease: the new round joins it instead of a second POST (and
#: if it fails, the new round is due at once: see ``RECORD_DELIVERY``).
REDELIVER = (
    "UPDATE outbox SET due_at = ?, round_from = ?, attempts = 0, gave_up_at = NULL, "
    "lease_owner = CASE WHEN lease_until > ? THEN lease_owner END, "
    "lease_until = CASE WHEN lease_until > ? THEN lease_until END "
    "WHERE job_id = ? AND event IS NOT NULL "
    "AND EXISTS (SELECT 1 FROM jobs WHERE jobs.id = outbox.job_id AND jobs.expires_at > ?)"
)
#: When the earliest waiting delivery may be claimed, to know how long to sleep: one in
#: flight (leased) not before its lease ends, else its due time would wake the runner at once.
NEXT_DUE = (
    "SELECT min(CASE WHEN lease_until > due_at THEN lease_until ELSE due_at END) "
    "FROM outbox WHERE due_at IS NOT NULL"
)
DELETE_OUTBOX_OF = "DELETE FROM outbox WHERE job_id IN (SELECT value FROM json_each(?))"
FORGET_OUTBOX = "DELETE FROM outbox WHERE job_id = ?"


#: A job's unexpired retries by the same caller, newest first (a merged export's overlays).
RETRIES = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE parent_id = ? AND caller = ? "
    "AND expires_at > ? ORDER BY created_at DESC, id DESC LIMIT ?"
)
