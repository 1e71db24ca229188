"""The outbox's SQL: jobs' terminal events and their deliveries (schema version 3).

Part of the PostgreSQL store's SQL, named as in :mod:`._queries` (the rest of it); all values
are bound parameters.
"""

from __future__ import annotations

from ._queries import JOBS_NOW, LIVE

__all__: list[str] = []  # imported as a module: ``from . import _outbox_queries as oq``

CREATE_OUTBOX = (
    """CREATE TABLE outbox (
        job_id text PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
        event_id text NOT NULL,
        url text,
        callback boolean NOT NULL DEFAULT false,
        event text,
        job_status text,
        job_error text,
        job_metadata text,
        targets_total integer,
        targets_done integer,
        targets_failed integer,
        event_at double precision,
        round_from double precision,
        due_at double precision,
        attempts integer NOT NULL DEFAULT 0,
        last_answer text,
        last_attempt_at double precision,
        delivered_at double precision,
        gave_up_at double precision,
        -- The runner delivering the event now, and until when (its clock).
        lease_owner text,
        lease_until double precision
    )""",
    # The deliveries due: only rows waiting for an attempt are in it.
    "CREATE INDEX outbox_due ON outbox (due_at) WHERE due_at IS NOT NULL",
)
#: A new job that is to tell of its end.
INSERT_OUTBOX = "INSERT INTO outbox (job_id, event_id, url, callback) VALUES (%s, %s, %s, %s)"
#: The terminal events of jobs (an array of ids) whose status has just become terminal, in the
#: same transaction; a job without an outbox row, or whose event was written, is not touched.
#: ``now`` NULL: the database's clock (as the reap's ``updated_at``).
EMIT_EVENTS = (
    "UPDATE outbox SET event = 'job.' || j.status, job_status = j.status, job_error = j.error, "
    "job_metadata = j.metadata, "
    "targets_total = j.targets_total, targets_done = j.targets_done, "
    "targets_failed = j.targets_failed, event_at = t.now, round_from = t.now, due_at = t.now "
    "FROM jobs AS j, (SELECT coalesce(%(now)s::float8, extract(epoch FROM now())::float8) "
    "AS now) AS t WHERE outbox.job_id = j.id AND outbox.event IS NULL "
    f"AND j.status NOT IN {LIVE} AND j.id = ANY(%(ids)s)"
)
EVENT_COLUMNS = (
    "event_id, event, job_id, job_status, job_error, targets_total, targets_done, "
    "targets_failed, event_at, url, callback, attempts, round_from, job_metadata"
)
#: Lease the delivery due first that no live runner holds: one runner delivers an event at a
#: time; a lease that lapsed, or whose runner was reaped, is taken over. SKIP LOCKED: runners
#: claiming at once take different rows.
CLAIM_DELIVERY = (
    "UPDATE outbox SET lease_owner = %(runner)s, lease_until = %(until)s WHERE job_id = ("
    "SELECT job_id FROM outbox WHERE due_at <= %(now)s AND (lease_until IS NULL "
    "OR lease_until <= %(now)s "
    "OR NOT EXISTS (SELECT 1 FROM runners WHERE runners.id = outbox.lease_owner)) "
    "AND (url IS NULL OR NOT EXISTS (SELECT 1 FROM unnest(%(skip)s::text[]) AS s(p) "
    "WHERE url = p OR left(url, length(p) + 1) IN (p || '/', p || '?', p || '#'))) "
    "ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED) "
    f"RETURNING {EVENT_COLUMNS}, "
    "(SELECT trace_context FROM jobs WHERE jobs.id = outbox.job_id)"
)
#: One attempt's answer, if the lease is still the writer's; ``due_at`` NULL ends the round.
#: A failure claimed in an earlier round (a redelivery joined the attempt) counts nothing and
#: leaves the new round due as the redelivery set it: its schedule was the old round's.
_SAME_ROUND = "(%(delivered_at)s::float8 IS NOT NULL OR round_from = %(round_from)s::float8)"
RECORD_DELIVERY = (
    f"UPDATE outbox SET attempts = attempts + CASE WHEN {_SAME_ROUND} THEN 1 ELSE 0 END, "
    "last_answer = %(answer)s, last_attempt_at = %(now)s, "
    "delivered_at = coalesce(%(delivered_at)s::float8, delivered_at), "
    f"due_at = CASE WHEN {_SAME_ROUND} THEN %(due)s::float8 ELSE due_at END, "
    f"gave_up_at = CASE WHEN {_SAME_ROUND} THEN %(gave_up)s::float8 END, "
    "lease_owner = NULL, lease_until = NULL "
    "WHERE job_id = %(job_id)s AND event_id = %(event_id)s "
    "AND lease_owner IS NOT DISTINCT FROM %(owner)s"
)
DELIVERY_COLUMNS = (
    "o.event_id, o.url, o.event, o.attempts, o.last_answer, o.last_attempt_at, "
    "o.delivered_at, o.due_at, o.gave_up_at"
)
#: The delivery state of an unexpired job's event.
GET_DELIVERY = (
    f"SELECT {DELIVERY_COLUMNS} FROM outbox AS o JOIN {JOBS_NOW} AS j ON j.id = o.job_id "
    "WHERE o.job_id = %s AND j.expires_at > %s"
)
#: A new round of attempts for an unexpired job's written event (any lease dropped: its
#: answer is ignored).
REDELIVER = (
    "UPDATE outbox AS o SET due_at = %s, round_from = %s, attempts = 0, gave_up_at = NULL, "
    "lease_owner = CASE WHEN o.lease_until > %s THEN o.lease_owner END, "
    "lease_until = CASE WHEN o.lease_until > %s THEN o.lease_until END "
    "FROM jobs AS j WHERE o.job_id = %s "
    "AND o.event IS NOT NULL AND j.id = o.job_id AND j.expires_at > %s "
    f"RETURNING {DELIVERY_COLUMNS}"
)
#: When the earliest waiting delivery may be claimed, to know how long to sleep: one in
#: flight (leased) not before its lease ends, else its due time would wake the runner at once.
NEXT_DUE = (
    "SELECT min(CASE WHEN lease_until > due_at THEN lease_until ELSE due_at END) "
    "FROM outbox WHERE due_at IS NOT NULL"
)
