"""The PostgreSQL store's submit as one function on the server (schema v9): its SQL, named.

A submit that creates a job was five round trips, then three (the admission's read, the
locked reads, the writes), each statement its own parse, bind and answer on both sides. The
function runs the same statements in one. The creation lock is tried first (schema v13): if
it is free, it is taken at once and ``ADMISSION`` read once, under it. If another holds it,
``ADMISSION`` is read with no lock taken; if that refuses or reuses, it answers so at once,
not queued behind the lock; otherwise it waits for the lock and reads ``ADMISSION`` again.
Each read under the lock has a fresh snapshot taken once the lock is granted (READ
COMMITTED, a volatile function). Then, if the caps still allow it, the runner's registration
share-locked and the job's rows. One statement, so one implicit transaction: the lock ends
with it.
"""

from __future__ import annotations

import re

from . import _queries as q

__all__: list[str] = []  # imported as a module: ``from . import _create_queries as cq``

#: The function's arguments, in order, and their types: the job's columns as ``INSERT_JOB``
#: takes them, the targets' status and their URLs, options and custom ids as JSON arrays in
#: text (options and custom ids NULL: plain targets, from their URLs alone), the labels as two
#: arrays (NULLs: none), the outbox row's values (``event_id`` NULL: none), and the caps. The
#: targets are text, parsed only once the job is made: a refused submit sends them as one
#: string each, which costs next to nothing to dump and nothing to parse.
_ARGS = (
    ("id", "text"), ("status", "text"), ("error", "text"), ("targets_total", "integer"),
    ("targets_done", "integer"), ("targets_failed", "integer"), ("caller", "text"),
    ("caller_class", "text"), ("idem_key", "text"), ("created_at", "double precision"),
    ("updated_at", "double precision"), ("expires_at", "double precision"),
    ("metadata", "text"), ("parent_id", "text"), ("trace_context", "text"), ("owner", "text"),
    ("pending", "text"), ("urls", "text"), ("options", "text"), ("custom_ids", "text"),
    ("label_keys", "text[]"), ("label_values", "text[]"),
    ("event_id", "text"), ("webhook_url", "text"), ("callback", "boolean"),
    ("now", "double precision"), ("targets_per_job", "integer"),
    ("jobs_per_caller", "integer"), ("jobs_total", "integer"),
)  # fmt: skip
#: The names of the function's arguments, in order: :meth:`PostgresStore.create_job` sends
#: its values so.
CREATE_JOB_ARGS = tuple(name for name, _ in _ARGS)

#: ``ADMISSION`` inside the function: its parameters as the function's arguments.
_ADMISSION = re.sub(
    r"%\((\w+)\)s",
    lambda m: {"caller": "p_caller", "key": "p_idem_key", "now": "p_now"}[m.group(1)],
    q.ADMISSION,
)
_JOB_NAMES = [name.strip() for name in q.JOB_COLUMNS.split(",")]
#: The answer's columns: whether the job was created; whether the runner is registered (NULL
#: if it was not asked: refused on a cap, or reused); then ``ADMISSION``'s row, as read last.
_OUT = (
    "o_created boolean, o_registered boolean, "
    + ", ".join(f"o_{name} {dict(_ARGS)[name]}" for name in _JOB_NAMES)
    + ", o_caller_live bigint, o_total_live bigint, o_newest_live text"
)
_INTO = ", ".join(f"o_{name}" for name in [*_JOB_NAMES, "caller_live", "total_live", "newest_live"])
#: Whether the admission row read last lets the job be made (the caps of ``check_caps``, which
#: tells the refusal apart from it: a test ties the two).
_ALLOWED = (
    "o_id IS NULL AND p_targets_total <= p_targets_per_job "
    "AND o_caller_live < p_jobs_per_caller AND o_total_live < p_jobs_total"
)
_INSERT_JOB = (
    f"INSERT INTO jobs ({q.JOB_COLUMNS}, trace_context, owner) VALUES ("
    + ", ".join(f"p_{name}" for name in [*_JOB_NAMES, "trace_context", "owner"])
    + ")"
)
_INSERT_TARGETS = (
    "INSERT INTO targets (job_id, idx, url, options, status, custom_id) "
    "SELECT p_id, t.idx - 1, t.url, t.options, p_pending, t.custom_id "
    "FROM ROWS FROM (json_array_elements_text(p_urls::json), "
    "json_array_elements_text(p_options::json), json_array_elements_text(p_custom_ids::json)) "
    "WITH ORDINALITY AS t(url, options, custom_id, idx)"
)
#: Plain targets (no options, no custom id: ``p_options`` NULL) from their URLs alone.
_INSERT_PLAIN_TARGETS = (
    "INSERT INTO targets (job_id, idx, url, options, status) "
    "SELECT p_id, t.idx - 1, t.url, '{}', p_pending "
    "FROM json_array_elements_text(p_urls::json) WITH ORDINALITY AS t(url, idx)"
)

#: The submit's function (see the module's docstring): version 9 made it, version 10 made it
#: again (plain targets from their URLs alone), version 11 too (the targets as JSON text; its
#: arguments' types changed, so the old one is dropped first), version 13 too (the lock tried
#: first; the same arguments and answer, so a runner of version 12 calls it unchanged).
CREATE_CREATE_JOB_FUNCTION = (
    "CREATE OR REPLACE FUNCTION trio_batch_create_job("
    + ", ".join(f"p_{name} {type_}" for name, type_ in _ARGS)
    + f") RETURNS TABLE ({_OUT}) LANGUAGE plpgsql AS $body$\nBEGIN\n"
    # The lock free (the common case): taken at once, ADMISSION read once, under it.
    f"IF NOT pg_try_advisory_xact_lock({q.LOCK_CLASS}, {q.LOCK_CREATE}) THEN\n"
    f"SELECT * INTO {_INTO} FROM ({_ADMISSION}) AS a;\n"
    f"IF NOT ({_ALLOWED}) THEN o_created := false; RETURN NEXT; RETURN; END IF;\n"
    f"PERFORM pg_advisory_xact_lock({q.LOCK_CLASS}, {q.LOCK_CREATE});\n"
    "END IF;\n"
    f"SELECT * INTO {_INTO} FROM ({_ADMISSION}) AS a;\n"
    f"IF NOT ({_ALLOWED}) THEN o_created := false; RETURN NEXT; RETURN; END IF;\n"
    "o_registered := p_owner IS NULL OR EXISTS "
    "(SELECT 1 FROM runners WHERE runners.id = p_owner FOR SHARE);\n"
    "IF NOT o_registered THEN o_created := false; RETURN NEXT; RETURN; END IF;\n"
    "UPDATE jobs SET current = false WHERE caller = p_caller AND idem_key = p_idem_key "
    f"AND current AND {q.LEASE_NOW} <= p_now;\n"
    # A second current job of the key (a writer that skipped the lock) is refused by the
    # unique index: UniqueViolation.
    f"{_INSERT_JOB};\n"
    f"IF p_options IS NULL THEN {_INSERT_PLAIN_TARGETS}; ELSE {_INSERT_TARGETS}; END IF;\n"
    "IF cardinality(p_label_keys) > 0 THEN "
    "INSERT INTO job_labels (job_id, caller, key, value, created_at) "
    "SELECT p_id, p_caller, l.key, l.value, p_created_at "
    "FROM unnest(p_label_keys, p_label_values) AS l(key, value); END IF;\n"
    "IF p_event_id IS NOT NULL THEN INSERT INTO outbox (job_id, event_id, url, callback) "
    "VALUES (p_id, p_event_id, p_webhook_url, p_callback); END IF;\n"
    "o_created := true; RETURN NEXT;\nEND $body$"
)
#: Before version 11 the function had other arguments' types: dropped, not overloaded.
DROP_CREATE_JOB_FUNCTION = "DROP FUNCTION IF EXISTS trio_batch_create_job"
#: A submit through that function: its arguments in ``CREATE_JOB_ARGS``' order, each cast to
#: its type; one row, always (``_OUT``'s columns).
CREATE_JOB = (
    "SELECT * FROM trio_batch_create_job(" + ", ".join(f"%s::{type_}" for _, type_ in _ARGS) + ")"
)
#: Where ``ADMISSION``'s row starts in the function's answer.
CREATE_JOB_ADMISSION_AT = 2
