"""The SQL of the live jobs' narrow tables, named: ``live_jobs`` (schema v14), what the caps
count, and ``live_progress`` (v15), what every outcome changes; both kept by triggers on
``jobs`` (run by :mod:`._schema`). The statements that read them are in :mod:`._queries`.
"""

from __future__ import annotations

from ._queries import LIVE, PROGRESS

__all__: list[str] = []  # imported as a module: ``from . import _live_queries as lq``

#: Version 14: the live jobs, one narrow row each, kept by triggers on ``jobs`` (so every
#: statement that makes, ends or deletes a job keeps it, whichever it is). What the caps and
#: the live counts read. Counting ``jobs`` itself stepped over every version of every job
#: ended since the oldest open transaction began: a transaction held open (a stuck client, a
#: long report) keeps them all, so each submit read more the longer it lasted (a job's row
#: is wide, and updated at each outcome). A ``live_jobs`` row is written twice, at the job's
#: start and end, and about twenty fit where one job's versions did. Jobs stored before
#: version 14 that are live are copied in.
LIVE_JOBS_FUNCTION = f"""CREATE OR REPLACE FUNCTION trio_batch_live_jobs() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status IN {LIVE} THEN
        DELETE FROM live_jobs WHERE job_id = OLD.id;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.status IN {LIVE} THEN
        INSERT INTO live_jobs (job_id, caller, created_at)
        VALUES (NEW.id, NEW.caller, NEW.created_at);
    END IF;
    RETURN NULL;
END $body$"""
MIGRATE_V14_LIVE_JOBS = (
    """CREATE TABLE IF NOT EXISTS live_jobs (
        job_id text PRIMARY KEY,
        caller text NOT NULL,
        created_at double precision NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS live_jobs_caller ON live_jobs (caller, created_at)",
    LIVE_JOBS_FUNCTION,
    "DROP TRIGGER IF EXISTS trio_batch_live_jobs_made ON jobs",
    "CREATE TRIGGER trio_batch_live_jobs_made AFTER INSERT OR DELETE ON jobs "
    "FOR EACH ROW EXECUTE FUNCTION trio_batch_live_jobs()",
    "DROP TRIGGER IF EXISTS trio_batch_live_jobs_moved ON jobs",
    # Only a change of status: the outcomes' updates that leave it as it is call nothing.
    "CREATE TRIGGER trio_batch_live_jobs_moved AFTER UPDATE OF status ON jobs FOR EACH ROW "
    "WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION trio_batch_live_jobs()",
    "DELETE FROM live_jobs",
    f"INSERT INTO live_jobs SELECT id, caller, created_at FROM jobs WHERE status IN {LIVE}",
)


#: Version 15: what every outcome changes (``PROGRESS``: the counts, results_size, updated_at
#: and the lease) kept, while a job is live, in a narrow row of its own in ``live_progress``,
#: and copied into its ``jobs`` row when it ends. Each outcome updated the job's wide row,
#: which a full page could not take again in place: under a held xmin (no version can be
#: pruned) most of those updates left their page, and every index of ``jobs`` gained an entry
#: for each. A progress row is narrow and no index covers what changes in it, so an outcome's
#: update is HOT wherever its page has room (the live rows are the table's newest, so they
#: share its last pages with the free space): a held xmin keeps a small version of it, not of
#: the wide row. ``jobs`` is written twice: made, and ended. Readers take a live job's
#: progress from there (``JOBS_NOW``, ``LEASE_NOW``). Not in ``live_jobs``: the caps count
#: that table at each submit, and its rows stay written twice. No fillfactor: room kept on
#: each page would cost more pages than the index entries it saves.
#:
#: The triggers keep the rows whichever statement moves a job: made live, a progress row with
#: the job's; ended, the progress copied into the job's row before the progress row goes (the
#: larger of each count: they only grow, and the outcome that ends a job wrote its own; the
#: live lease unless the statement wrote one: a cancel or a reap does not; ``updated_at`` as
#: the statement wrote it, as each that ends a job does); a live job's counts written to
#: ``jobs`` itself (a runner of an earlier version storing an outcome, during a rolling
#: upgrade), copied into its progress row.
LIVE_JOBS_FUNCTION_V15 = f"""CREATE OR REPLACE FUNCTION trio_batch_live_jobs() RETURNS trigger
LANGUAGE plpgsql AS $body$
DECLARE
    live live_progress%ROWTYPE;
BEGIN
    IF TG_WHEN = 'BEFORE' THEN
        SELECT * INTO live FROM live_progress WHERE job_id = OLD.id;
        IF FOUND THEN
            NEW.targets_done := greatest(NEW.targets_done, live.targets_done);
            NEW.targets_failed := greatest(NEW.targets_failed, live.targets_failed);
            NEW.results_size := greatest(NEW.results_size, live.results_size);
            IF NEW.expires_at IS NOT DISTINCT FROM OLD.expires_at THEN
                NEW.expires_at := live.expires_at;
            END IF;
        END IF;
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.status IN {LIVE} AND NEW.status IN {LIVE} THEN
        UPDATE live_progress SET targets_done = greatest(targets_done, NEW.targets_done),
            targets_failed = greatest(targets_failed, NEW.targets_failed),
            results_size = greatest(results_size, NEW.results_size),
            updated_at = greatest(updated_at, NEW.updated_at),
            expires_at = greatest(expires_at, NEW.expires_at)
        WHERE job_id = NEW.id;
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status IN {LIVE} THEN
        DELETE FROM live_jobs WHERE job_id = OLD.id;
        DELETE FROM live_progress WHERE job_id = OLD.id;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.status IN {LIVE} THEN
        INSERT INTO live_jobs (job_id, caller, created_at)
        VALUES (NEW.id, NEW.caller, NEW.created_at);
        INSERT INTO live_progress (job_id, {", ".join(PROGRESS)})
        VALUES (NEW.id, {", ".join("NEW." + c for c in PROGRESS)});
    END IF;
    RETURN NULL;
END $body$"""
MIGRATE_V15_PROGRESS = (
    """CREATE TABLE IF NOT EXISTS live_progress (
        job_id text PRIMARY KEY,
        targets_done integer NOT NULL,
        targets_failed integer NOT NULL,
        results_size bigint NOT NULL,
        updated_at double precision NOT NULL,
        expires_at double precision NOT NULL
    )""",
    LIVE_JOBS_FUNCTION_V15,
    "DROP TRIGGER IF EXISTS trio_batch_live_jobs_ending ON jobs",
    "CREATE TRIGGER trio_batch_live_jobs_ending BEFORE UPDATE OF status ON jobs FOR EACH ROW "
    f"WHEN (OLD.status IN {LIVE} AND NEW.status NOT IN {LIVE}) "
    "EXECUTE FUNCTION trio_batch_live_jobs()",
    "DROP TRIGGER IF EXISTS trio_batch_live_jobs_counted ON jobs",
    "CREATE TRIGGER trio_batch_live_jobs_counted AFTER UPDATE OF targets_done ON jobs "
    f"FOR EACH ROW WHEN (OLD.status IN {LIVE} AND NEW.status IN {LIVE}) "
    "EXECUTE FUNCTION trio_batch_live_jobs()",
    # The live jobs' progress as it stands, in their jobs rows (written by v14's outcomes).
    "DELETE FROM live_progress",
    f"INSERT INTO live_progress SELECT id, {', '.join(PROGRESS)} FROM jobs WHERE status IN {LIVE}",
)
