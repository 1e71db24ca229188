"""The PostgreSQL store's submit (``create_job``): one round trip, and the reads under its lock.

On a real throw-away server (see pg_server.py), through a direct connection and PgBouncer.
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from trio_batch import Busy, CallerBusy, JobState, TooManyTargets
from trio_batch.store import NewJob
from trio_batch.store._new_job import new_job
from trio_batch.store.postgres import SCHEMA_VERSION, PostgresStore
from trio_batch.store.postgres import _create_queries as cq
from trio_batch.store.postgres import _queries as q
from trio_batch.store.postgres._store import _label_values, _outbox_values, _target_values

from ..support.fakes import T0, urls
from ..support.markers import PGBOUNCER
from ..support.pg_versions import back_to_v14

TTL = 3600.0
CAPS = {"targets_per_job": 32, "jobs_per_caller": 1, "jobs_total": 8}


@pytest.fixture(params=["direct", pytest.param("pooled", marks=PGBOUNCER)])
def dsn(request: pytest.FixtureRequest, pg_dsn: str) -> str:
    return pg_dsn if request.param == "direct" else str(request.getfixturevalue("pooled_dsn"))


@pytest.fixture
def store(dsn: str) -> Iterator[PostgresStore]:
    opened = PostgresStore.open(dsn)
    try:
        yield opened
    finally:
        opened.close(final=True)


def _sql(dsn: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def _round_trips(store: PostgresStore, caller: str) -> int:
    """How many times ``create_job`` of a new job waits for the server: the messages that
    ask for an answer (a simple query, a pipeline's ``Sync``), from libpq's trace."""
    conn = store.connection()
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            store.create_job(NewJob(caller, "user", urls("a", "b"), ttl=TTL, **CAPS), now=T0)
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t") for line in trace.read().splitlines()]
    return sum(1 for fields in sent if fields[0] == "F" and fields[2] in ("Query", "Sync"))


def test_a_create_is_one_round_trip(dsn: str) -> None:
    # The submit's function (schema v9): the admission's read, the lock, the reads under it
    # and the writes in one statement. It was five round trips: the read, BEGIN with its
    # bounds, the locked reads' pipeline, the writes' pipeline, COMMIT. Through a pooler the
    # bounds go as SET LOCAL in the same message.
    store = PostgresStore.open(dsn)
    try:
        _round_trips(store, "warm")  # the connection's first statements: its settings
        assert _round_trips(store, "alice") == 1
    finally:
        store.close(final=True)


def _wait_for_a_lock_waiter(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.01)
    raise AssertionError("no create waited for the lock")


def test_a_job_committed_while_a_create_waits_for_the_lock_is_counted_under_it(
    store: PostgresStore, pg_dsn: str
) -> None:
    # The admission read (no lock) let alice's submit through; another session held the
    # creation lock meanwhile and committed a live job of alice's. Read again under the lock,
    # the cap refuses the submit, naming that job, and ends the transaction: the lock is free.
    refused: list[BaseException] = []

    def submit() -> None:
        try:
            store.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **CAPS), now=T0)
        except BaseException as exc:
            refused.append(exc)

    with psycopg.connect(pg_dsn) as holder:
        holder.execute(q.XACT_LOCK, (q.LOCK_CLASS, q.LOCK_CREATE))
        holder.execute(
            "INSERT INTO jobs (id, status, targets_total, caller, caller_class, idem_key, "
            "created_at, updated_at, expires_at) VALUES ('other', 'queued', 1, 'alice', "
            "'user', 'k', %s, %s, %s)",
            (T0, T0, T0 + TTL),
        )
        thread = threading.Thread(target=submit)
        thread.start()
        _wait_for_a_lock_waiter(pg_dsn)
        holder.commit()
    thread.join(10)
    assert len(refused) == 1 and isinstance(refused[0], CallerBusy)
    assert refused[0].job_id == "other"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE jobs SET status = 'done' WHERE id = 'other'")
        held = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        assert held.fetchone() == (0,)
    job, reused = store.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **CAPS), now=T0)
    assert not reused and job.status is JobState.QUEUED


def test_the_submit_function_is_the_one_the_migrations_make() -> None:
    """The submit is a function the schema migration creates (ADMISSION, the inserts and the
    caps inlined): once any of them changes, a database migrated earlier still runs the old
    one. Change it only with a new schema version whose step creates it again (``CREATE OR
    REPLACE``), then update this digest."""
    digest = hashlib.sha256(cq.CREATE_CREATE_JOB_FUNCTION.encode()).hexdigest()[:16]
    assert (digest, SCHEMA_VERSION) == ("cccd94b1ab8f9fba", 17)


def test_the_call_is_the_one_a_version_12_runner_sends() -> None:
    """A runner started before the upgrade to v13 keeps calling the function as v12 did
    (a rolling upgrade): the function's arguments and answer must stay as they were, so the
    call's text does (its digest at v12)."""
    assert hashlib.sha256(cq.CREATE_JOB.encode()).hexdigest()[:16] == "2ede58f4dfe9f417"


#: ``ADMISSION`` up to version 13: the live jobs counted from ``jobs``.
_LIVE = "status IN ('queued', 'running')"


def _v14(sql: str) -> str:
    """``sql`` as it was up to version 14: a live job's lease read from ``jobs``."""
    return sql.replace(f"{q.JOBS_NOW} AS jobs", "jobs").replace(q.LEASE_NOW, "expires_at")


def _v13_admission(admission: str, caller: str) -> str:
    """``admission`` (``ADMISSION``, or the function's, whose caller is ``caller``) as it was
    up to version 13, reading the live jobs from ``jobs``."""
    return (
        _v14(admission)
        .replace(
            f"(SELECT count(*) FROM live_jobs WHERE caller = {caller})",
            f"(SELECT count(*) FROM jobs WHERE {_LIVE} AND caller = {caller})",
        )
        .replace("(SELECT count(*) FROM live_jobs)", f"(SELECT count(*) FROM jobs WHERE {_LIVE})")
        .replace(
            f"(SELECT job_id FROM live_jobs WHERE caller = {caller} ",
            f"(SELECT id FROM jobs WHERE {_LIVE} AND caller = {caller} ",
        )
    )


def _v12_function() -> str:
    """The submit's function as version 12 made it: ``ADMISSION`` read before the lock and
    again under it, whether the lock was free or not (checked against v12's digest)."""
    src = cq.CREATE_CREATE_JOB_FUNCTION
    read = f"SELECT * INTO {cq._INTO} FROM ({_v13_admission(cq._ADMISSION, 'p_caller')}) AS a;\n"
    refuse = "o_created := false; RETURN NEXT; RETURN; END IF;\n"
    v12 = (
        src[: src.index("BEGIN\n") + 6]
        + read
        + f"IF NOT ({cq._ALLOWED}) THEN {refuse}"
        + f"PERFORM pg_advisory_xact_lock({q.LOCK_CLASS}, {q.LOCK_CREATE});\n"
        + read
        + "o_registered := p_owner IS NULL OR EXISTS "
        "(SELECT 1 FROM runners WHERE runners.id = p_owner FOR SHARE);\n"
        + f"IF NOT ({cq._ALLOWED}) OR NOT o_registered THEN {refuse}"
        + _v14(src[src.index("UPDATE jobs SET current") :])
    )
    assert hashlib.sha256(v12.encode()).hexdigest()[:16] == "5d98c8f8a9843e9a"
    return v12


def _back_to_v12(dsn: str) -> None:
    """The database as version 12 left it: its submit's function and its version, and no
    ``live_jobs`` (version 14's)."""
    back_to_v14(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE live_jobs")
        conn.execute("DROP TRIGGER trio_batch_live_jobs_made ON jobs")
        conn.execute("DROP TRIGGER trio_batch_live_jobs_moved ON jobs")
        conn.execute(_v12_function())
        conn.execute("UPDATE trio_batch_schema SET version = 12")


#: Scans of ``jobs`` and ``live_jobs`` so far in this transaction (not yet in the shared counts).
_JOB_SCANS = (
    "SELECT sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)) FROM pg_stat_xact_user_tables "
    "WHERE relname IN ('jobs', 'live_jobs')"
)


def _create_values(store: PostgresStore, new: NewJob) -> tuple[object, ...]:
    """The function's arguments for ``new``, as ``PostgresStore.create_job`` sends them."""
    insert = new_job(new, now=T0)
    values = (
        *insert.job_params(),
        store.runner_id,
        *_target_values(insert),
        *_label_values(insert.job),
        *_outbox_values(new),
        T0,
        new.targets_per_job,
        new.jobs_per_caller,
        new.jobs_total,
    )
    assert len(values) == len(cq.CREATE_JOB_ARGS)
    return values


def _admission_reads(
    conn: psycopg.Connection[Any], store: PostgresStore, caller: str, *, version: int = 14
) -> int:
    """How many times a submit of a new one-target job of ``caller`` that is created reads
    ``ADMISSION``, by the scans of ``jobs`` it makes on ``conn`` (its writes' two besides:
    the lapsed job's retirement and the target's foreign key), in a transaction of its own
    (committed: psycopg forgets its prepared statements at a rollback)."""
    with conn.transaction():
        read = conn.execute(_JOB_SCANS).fetchone()
        admission = q.ADMISSION if version >= 14 else _v13_admission(q.ADMISSION, "%(caller)s")
        conn.execute(admission, {"caller": caller, "key": "k", "now": T0})
        admission = conn.execute(_JOB_SCANS).fetchone()
        new = NewJob(caller, "user", urls("a"), ttl=TTL, **CAPS)
        row = conn.execute(cq.CREATE_JOB, _create_values(store, new)).fetchone()
        done = conn.execute(_JOB_SCANS).fetchone()
    assert read and admission and done and row and row[0]  # created
    scans, writes = int(admission[0]) - int(read[0]), 2
    reads, rest = divmod(int(done[0]) - int(admission[0]) - writes, scans)
    assert rest == 0, (scans, done, admission)
    return reads


def test_a_submit_that_finds_the_lock_free_reads_its_admission_once(pg_dsn: str) -> None:
    # v12 read ADMISSION before the lock and again under it (~22 µs of server CPU each);
    # v13 tries the lock first and, granted, reads under it alone.
    store = PostgresStore.open(pg_dsn)
    try:
        with psycopg.connect(pg_dsn) as conn:
            assert _admission_reads(conn, store, "alice") == 1
            _back_to_v12(pg_dsn)
            assert _admission_reads(conn, store, "bob", version=12) == 2
    finally:
        store.close(final=True)


def test_a_runner_of_version_12_keeps_submitting_across_the_upgrade(pg_dsn: str) -> None:
    # A rolling upgrade: a runner started at v12 (here: a store whose database was v12 when
    # it last looked; the call it sends is v12's, tested above) holds a connection on which
    # its submit is a prepared statement and v12's function compiled. Another runner opens
    # the database at v13 and migrates it: the first one's next submits run v13's function
    # on that same connection, and both runners' jobs count under one set of caps.
    caps = {"targets_per_job": 32, "jobs_per_caller": 1, "jobs_total": 8}
    old = PostgresStore.open(pg_dsn)
    new: PostgresStore | None = None
    try:
        _back_to_v12(pg_dsn)
        for n in range(8):  # psycopg prepares a statement at its fifth run
            old.create_job(NewJob(f"old{n}", "user", urls("a"), ttl=TTL, **caps), now=T0)
            _sql(pg_dsn, "UPDATE jobs SET status = 'done'")
        conn = old.connection()
        prepared = "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s"
        assert conn.execute(prepared, ("%trio_batch_create_job%",)).fetchone() == (1,)
        assert _admission_reads(conn, old, "probe", version=12) == 2
        _sql(pg_dsn, "UPDATE jobs SET status = 'done'")
        new = PostgresStore.open(pg_dsn)
        assert _sql(pg_dsn, "SELECT version FROM trio_batch_schema") == [(SCHEMA_VERSION,)]
        theirs, _ = new.create_job(NewJob("alice", "user", urls("n"), ttl=TTL, **caps), now=T0)
        with pytest.raises(CallerBusy) as busy:
            old.create_job(NewJob("alice", "user", urls("o"), ttl=TTL, **caps), now=T0)
        assert busy.value.job_id == theirs.id
        mine, reused = old.create_job(NewJob("bob", "user", urls("o"), ttl=TTL, **caps), now=T0)
        assert not reused and mine.status is JobState.QUEUED
        assert old.connection() is conn
        assert conn.execute(prepared, ("%trio_batch_create_job%",)).fetchone() == (1,)
        assert _admission_reads(conn, old, "probe2") == 1
    finally:
        old.close(final=True)
        if new is not None:
            new.close(final=True)


_SOURCE = "SELECT prosrc FROM pg_proc WHERE proname = 'trio_batch_create_job'"


def test_a_version_12_database_holding_live_jobs_is_upgraded_in_place(pg_dsn: str) -> None:
    caps = {"targets_per_job": 32, "jobs_per_caller": 1, "jobs_total": 2}
    old = PostgresStore.open(pg_dsn)
    try:
        live, _ = old.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **caps), now=T0)
    finally:
        old.close(final=True)
    _back_to_v12(pg_dsn)
    for _ in range(2):  # again from v12 with v13's function in place: the step is idempotent
        store = PostgresStore.open(pg_dsn)
        try:
            assert _sql(pg_dsn, "SELECT version FROM trio_batch_schema") == [(SCHEMA_VERSION,)]
            [(source,)] = _sql(pg_dsn, _SOURCE)
            assert "pg_try_advisory_xact_lock" in str(source)
            with pytest.raises(CallerBusy) as busy:  # the live job counts under the new one
                store.create_job(NewJob("alice", "user", urls("b"), ttl=TTL, **caps), now=T0)
            assert busy.value.job_id == live.id
            again, reused = store.create_job(
                NewJob("alice", "user", urls("a"), ttl=TTL, **caps), now=T0
            )
            assert (again, reused) == (live, True)
        finally:
            store.close(final=True)
        _sql(pg_dsn, "UPDATE trio_batch_schema SET version = 12")
    store = PostgresStore.open(pg_dsn)
    try:
        bob, reused = store.create_job(NewJob("bob", "user", urls("b"), ttl=TTL, **caps), now=T0)
        assert not reused and bob.status is JobState.QUEUED
        with pytest.raises(Busy):
            store.create_job(NewJob("carol", "user", urls("c"), ttl=TTL, **caps), now=T0)
    finally:
        store.close(final=True)


@pytest.mark.parametrize("version", [8, 9, 10])
def test_an_older_database_gets_the_submit_function_that_takes_the_targets_as_json(
    pg_dsn: str, version: int
) -> None:
    # v9 made the function, v10 again (plain targets from their URLs alone), v11 again with
    # other argument types (the targets as JSON text): the older one is gone, not overloaded.
    PostgresStore.open(pg_dsn).close()
    _sql(pg_dsn, "DROP FUNCTION trio_batch_create_job")
    if version >= 9:  # as those versions made it: its targets as arrays
        _sql(
            pg_dsn,
            "CREATE FUNCTION trio_batch_create_job(p_urls text[]) RETURNS void "
            "LANGUAGE sql AS 'SELECT NULL'",
        )
    _sql(pg_dsn, f"UPDATE trio_batch_schema SET version = {version}")
    store = PostgresStore.open(pg_dsn)
    try:
        assert _sql(pg_dsn, "SELECT version FROM trio_batch_schema") == [(SCHEMA_VERSION,)]
        body = "SELECT prosrc FROM pg_proc WHERE proname = 'trio_batch_create_job'"
        [(source,)] = _sql(pg_dsn, body)
        assert "json_array_elements_text(p_urls::json) WITH ORDINALITY" in str(source)
        _, reused = store.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **CAPS), now=T0)
        assert not reused and _sql(pg_dsn, "SELECT count(*) FROM targets") == [(1,)]
    finally:
        store.close(final=True)


@pytest.mark.parametrize(
    ("live", "targets", "refused"),
    [
        ((0, 0), 3, None),
        ((0, 0), 4, TooManyTargets),
        ((1, 1), 3, None),
        ((2, 2), 3, CallerBusy),
        ((0, 3), 3, Busy),
    ],
)
def test_the_function_refuses_on_the_caps_check_caps_names(
    store: PostgresStore, live: tuple[int, int], targets: int, refused: type[Exception] | None
) -> None:
    # The function decides on the caps in SQL; check_caps names the one broken. Here each
    # boundary: under a cap the job is made, at it the refusal is the cap check_caps raises.
    caps = {"targets_per_job": 3, "jobs_per_caller": 2, "jobs_total": 3}
    mine, others = live
    for n in range(mine):
        store.create_job(NewJob("alice", "user", urls(f"m{n}"), ttl=TTL, **caps), now=T0)
    for n in range(others - mine):
        store.create_job(NewJob(f"o{n}", "user", urls(f"o{n}"), ttl=TTL, **caps), now=T0)
    new = NewJob("alice", "user", urls(*(f"t{i}" for i in range(targets))), ttl=TTL, **caps)
    if refused is None:
        job, reused = store.create_job(new, now=T0)
        assert not reused and job.targets_total == targets
    else:
        with pytest.raises(refused):
            store.create_job(new, now=T0)


@pytest.mark.parametrize("cap", [2**31 - 1, 2**31, 2**63, 10**30])
def test_a_cap_beyond_the_functions_integers_admits_as_any_cap_not_reached(
    store: PostgresStore, cap: int
) -> None:
    # Config takes any non-negative int as a cap; the submit's function takes its caps as
    # integer arguments, which must not refuse every submit (out of range) for one past them.
    caps = {**CAPS, "jobs_per_caller": cap, "jobs_total": cap}
    job, reused = store.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **caps), now=T0)
    assert not reused and job.status is JobState.QUEUED
    again, reused = store.create_job(NewJob("alice", "user", urls("b"), ttl=TTL, **caps), now=T0)
    assert not reused and again.id != job.id
