"""The PostgreSQL store's outcome writes and terminal statuses: their SQL, named.

An outcome is one statement (``RECORD_OUTCOME``), prepared on a direct connection and run
through a function of the same text on a pooled one (``RECORD_OUTCOME_CALL``); see
:mod:`._outcomes` for the Python that sends it. All values are bound parameters.
"""

from __future__ import annotations

import re

from ._queries import CHANNEL, JOB_COLUMNS, LEASE_NOW, LIVE

__all__: list[str] = []  # imported as a module: ``from . import _outcome_queries as wq``


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
