"""The PostgreSQL store's outcome writes and terminal statuses: their SQL, named.

The outcomes of a shared commit are one statement (``RECORD_OUTCOMES``), whatever their
number, run through a function of the same text (``RECORD_OUTCOMES_CALL``), pooler or not;
see :mod:`._outcomes` for the Python that sends it. All values are bound parameters.
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


#: The writes, one row each in the order given (``n``): one array per column, each write's
#: target distinct from the others' (the caller sends a repeated target once; a job may have
#: several writes).
_WRITES = (
    "w AS (SELECT * FROM unnest(%(job_ids)s, %(idxs)s, %(statuses)s, %(results)s, "
    "%(errors)s, %(hints)s, %(attempts)s, %(failed)s, %(sizes)s) WITH ORDINALITY "
    "AS w(job_id, idx, status, result, error, hint, attempts, failed, size, n))"
)
#: Their jobs that are unexpired and this runner's (fencing: a reaped job has lost its owner),
#: as they stand before the writes, locked in key order. Under READ COMMITTED a lock that
#: waited (on a concurrent reap, cancel or forget) re-checks the conditions on the row as
#: committed, so a reaped job reads as not owned; holding the locks, the job's updates below
#: see no one else's change. A live job's progress is in its ``live_progress`` row (v15).
_JOBS = (
    "job AS (SELECT j.id, j.status, j.error, j.targets_total, "
    "coalesce(l.targets_done, j.targets_done) AS targets_done, "
    "coalesce(l.targets_failed, j.targets_failed) AS targets_failed, j.caller, "
    "j.caller_class, j.idem_key, j.created_at, coalesce(l.updated_at, j.updated_at) AS "
    "updated_at, coalesce(l.expires_at, j.expires_at) AS expires_at, j.metadata, j.parent_id, "
    "j.waited FROM jobs AS j LEFT JOIN live_progress AS l ON l.job_id = j.id "
    "WHERE j.id = ANY (%(job_ids)s) AND j.owner IS NOT DISTINCT FROM %(runner)s "
    "AND coalesce(l.expires_at, j.expires_at) > %(now)s ORDER BY j.id FOR NO KEY UPDATE OF j)"
)
#: Each outcome whose target is pending and whose job is one of those.
_STORED = (
    "stored AS (UPDATE targets AS t SET status = w.status, result = w.result, "
    "error = w.error, hint = w.hint, finished_at = %(now)s, attempts = w.attempts, "
    "result_size = w.size "
    "FROM w, job WHERE t.job_id = w.job_id AND t.idx = w.idx AND t.status = 'pending' "
    "AND job.id = w.job_id RETURNING w.n, w.job_id, w.failed, w.size)"
)
#: What the stored outcomes add to each job.
_ADDED = (
    "added AS (SELECT job_id, count(*) AS done, sum(failed) AS failed, sum(size) AS size "
    "FROM stored GROUP BY job_id)"
)
#: A live job's counts, results_size and lease, bumped in its narrow ``live_progress`` row,
#: whose changed columns no index covers: the update is HOT wherever its page has room.
_PROGRESSED = (
    "progressed AS (UPDATE live_progress AS p SET targets_done = p.targets_done + a.done, "
    "targets_failed = p.targets_failed + a.failed, results_size = p.results_size + a.size, "
    "updated_at = %(now)s, expires_at = %(expires)s FROM added AS a WHERE p.job_id = a.job_id "
    "RETURNING p.job_id, p.targets_done, p.targets_failed, p.results_size)"
)


def _after(column: str, delta: str) -> str:
    """SQL for ``column`` of a job row after the writes: its bumped live row's value, or, for
    a job with none (no longer live), the row's own plus ``delta``."""
    return f"coalesce(p.{column}, jobs.{column} + a.{delta})"


#: The wide ``jobs`` row, written only where the live row does not hold the outcomes alone:
#: they end the job (its status, from the last, if it is still live; a cancelled job stays
#: cancelled), or the job has no live row. The end deletes the live row (a trigger of v15).
_BUMPED = (
    f"bumped AS (UPDATE jobs SET targets_done = {_after('targets_done', 'done')}, "
    f"targets_failed = {_after('targets_failed', 'failed')}, "
    f"results_size = {_after('results_size', 'size')}, "
    "updated_at = %(now)s, expires_at = %(expires)s, "
    f"status = CASE WHEN jobs.status IN {LIVE} "
    f"AND {_after('targets_done', 'done')} >= jobs.targets_total "
    f"THEN {final_status_case('jobs.targets_total', _after('targets_failed', 'failed'))} "
    "ELSE jobs.status END "
    "FROM added AS a LEFT JOIN progressed AS p ON p.job_id = a.job_id "
    "WHERE jobs.id = a.job_id AND coalesce(p.targets_done >= jobs.targets_total, true) "
    "RETURNING jobs.id, jobs.status, jobs.error, jobs.metadata, jobs.targets_total, "
    "jobs.targets_done, jobs.targets_failed)"
)
#: A job the writes ended: its event goes into the outbox with them.
_EMITTED = (
    "emitted AS (UPDATE outbox SET event = 'job.' || b.status, job_status = b.status, "
    "job_error = b.error, job_metadata = b.metadata, targets_total = b.targets_total, "
    "targets_done = b.targets_done, targets_failed = b.targets_failed, event_at = %(now)s, "
    "round_from = %(now)s, due_at = %(now)s FROM bumped AS b "
    f"WHERE outbox.job_id = b.id AND outbox.event IS NULL AND b.status NOT IN {LIVE})"
)
#: A job the writes ended: tell the listening runners, at the commit, if one waits on it
#: (``WATCH_JOB``) or a runner that does not register its waits is registered. The answer's
#: ``WHERE`` reads this arm, so it runs (a query arm that nothing reads is never run).
_TOLD = (
    f"told AS (SELECT pg_notify('{CHANNEL}', b.id) FROM bumped AS b JOIN job ON job.id = b.id "
    f"WHERE b.status NOT IN {LIVE} AND b.targets_done >= b.targets_total "
    "AND (job.waited OR EXISTS (SELECT 1 FROM runners WHERE NOT registers_waits)))"
)

#: Store a batch of outcomes in ONE statement, each all-or-nothing: the target, if it is still
#: pending and its job unexpired and this runner's; then each job's counts, results_size and
#: lease, and its terminal status and event with its last outcome. A refused write changes
#: nothing and raises nothing. One row per write, in order: ``n``, ``owned`` (the job is
#: known, unexpired and this runner's), ``stored``, and the job's columns as they were
#: before the batch (NULLs if not owned), from which each write's answer is made in order
#: (see :mod:`._outcomes`).
RECORD_OUTCOMES = (
    f"WITH {_WRITES}, {_JOBS}, {_STORED}, {_ADDED}, {_PROGRESSED}, {_BUMPED}, {_EMITTED}, "
    f"{_TOLD} SELECT w.n, job.id IS NOT NULL, s.n IS NOT NULL, job.id, job.status, job.error, "
    "job.targets_total, job.targets_done, job.targets_failed, job.caller, job.caller_class, "
    "job.idem_key, job.created_at, job.updated_at, job.expires_at, job.metadata, "
    "job.parent_id FROM w LEFT JOIN job ON job.id = w.job_id "
    "LEFT JOIN stored AS s ON s.n = w.n WHERE (SELECT count(*) FROM told) >= 0 ORDER BY w.n"
)
#: ``RECORD_OUTCOMES``'s parameters and their types: the arguments of the function below.
OUTCOMES_ARGS = (
    ("job_ids", "text[]"), ("idxs", "integer[]"), ("statuses", "text[]"),
    ("results", "text[]"), ("errors", "text[]"), ("hints", "text[]"),
    ("attempts", "integer[]"), ("failed", "integer[]"), ("sizes", "bigint[]"),
    ("now", "double precision"), ("expires", "double precision"), ("runner", "text"),
)  # fmt: skip
#: Version 16: ``RECORD_OUTCOMES`` as a PL/pgSQL function, so that it is one statement to
#: send whether or not a pooler is in the way (where nothing stays prepared): its text is
#: parsed once per server connection. Planned for each call's values (a batch's size, the
#: tables' as they are): a plan kept from a few small tables could read one whole. A change
#: to ``RECORD_OUTCOMES`` needs a migration that runs this again (a test holds its digest).
CREATE_RECORD_OUTCOMES_FUNCTION = (
    "CREATE OR REPLACE FUNCTION trio_batch_record_outcomes("
    + ", ".join(f"p_{name} {type_}" for name, type_ in OUTCOMES_ARGS)
    + ") RETURNS TABLE (n bigint, owned boolean, stored boolean, id text, status text, "
    "error text, targets_total integer, targets_done integer, targets_failed integer, "
    "caller text, caller_class text, idem_key text, created_at double precision, "
    "updated_at double precision, expires_at double precision, metadata text, "
    "parent_id text) "
    # The table's columns win over the output columns of the same names.
    "LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan "
    "AS $body$ #variable_conflict use_column\nBEGIN RETURN QUERY "
    + re.sub(r"%\((\w+)\)s", r"p_\1", RECORD_OUTCOMES)
    + "; END $body$"
)
#: Version 16: the function above. The one-outcome function of versions 6 to 15
#: (``trio_batch_record_outcome``) stays: a runner of those versions still running through a
#: pooler (a rolling upgrade) calls it for each outcome, and the tables it writes are as 16
#: keeps them.
MIGRATE_V16_OUTCOMES = (CREATE_RECORD_OUTCOMES_FUNCTION,)
#: Version 17: each stored result's size (characters), written with it, so the job view need
#: not read every result to size it (NULL on rows stored before: ``length(result)`` then).
MIGRATE_V17_RESULT_SIZE = (
    "ALTER TABLE targets ADD COLUMN IF NOT EXISTS result_size bigint",
    CREATE_RECORD_OUTCOMES_FUNCTION,
)
#: Version 12: waits registered, so that a job's end is notified only if a runner waits on
#: it elsewhere (``WATCH_JOB``, ``RECORD_OUTCOMES``).
MIGRATE_V12_WAITS = (
    "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false",
    "ALTER TABLE runners ADD COLUMN IF NOT EXISTS registers_waits boolean NOT NULL DEFAULT false",
)
#: ``RECORD_OUTCOMES`` through that function: the same parameters, the same rows. Each cast
#: to its argument's type, so a value out of its range is refused as by the statement itself.
RECORD_OUTCOMES_CALL = (
    "SELECT * FROM trio_batch_record_outcomes("
    + ", ".join(f"%({name})s::{type_}" for name, type_ in OUTCOMES_ARGS)
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
