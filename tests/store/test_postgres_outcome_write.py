"""PostgreSQL's outcome write: one statement per outcome, several in one shared commit.

Each outcome is one data-modifying statement (``RECORD_OUTCOME``) that stores the target only
if it is pending and its job unexpired and this runner's, bumps the job and sets its terminal
status with its last outcome. A refused write changes nothing and raises nothing, so a shared
commit needs no savepoint per write; a write whose values the database refuses aborts the
transaction, which is made again without it. A shared commit's writes go out together, in
psycopg's pipeline mode. On a real throw-away server (see pg_server.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import select
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from trio_batch import (
    Job,
    JobState,
    OutcomeExists,
    OutcomeWrite,
    Result,
    StoreError,
    StoreUnavailable,
    Target,
)
from trio_batch._model import final_status
from trio_batch.store import NewJob
from trio_batch.store.postgres import SCHEMA_VERSION, PostgresStore, _outcomes
from trio_batch.store.postgres import _outcome_queries as wq

from ..support.fakes import T0
from ..support.markers import PGBOUNCER
from .test_group_commit import TTL, create  # the same jobs as the shared-commit test


@pytest.fixture(params=["direct", pytest.param("through PgBouncer", marks=PGBOUNCER)])
def dsn(request: pytest.FixtureRequest, pg_dsn: str) -> str:
    """The test's database, directly (``RECORD_OUTCOME`` prepared) and through PgBouncer in
    transaction mode (the function that runs it, ``RECORD_OUTCOME_CALL``)."""
    return pg_dsn if request.param == "direct" else str(request.getfixturevalue("pooled_dsn"))


def _opened(dsn: str) -> Iterator[PostgresStore]:
    opened = PostgresStore.open(dsn)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def store(dsn: str) -> Iterator[PostgresStore]:
    yield from _opened(dsn)


@pytest.fixture
def direct_store(pg_dsn: str) -> Iterator[PostgresStore]:
    """A store on a direct connection: its server process is the one the test ends."""
    yield from _opened(pg_dsn)


def stored_row(store: PostgresStore, job_id: str) -> tuple[Any, ...]:
    """The job's row and its targets as stored, read past any lease."""
    conn = store.connection()
    job = conn.execute(
        "SELECT status, targets_done, targets_failed, results_size, updated_at, expires_at, "
        "owner FROM jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert job is not None
    targets = conn.execute(
        "SELECT status, result, error, attempts FROM targets WHERE job_id = %s ORDER BY idx",
        (job_id,),
    ).fetchall()
    return (*job, tuple(targets))


def test_the_outcome_function_is_the_one_the_migrations_make() -> None:
    """Through a pooler the outcome write is a function the schema migration creates: once
    RECORD_OUTCOME (or the function around it) changes, a database migrated earlier still
    runs the old one. Change it only with a new schema version whose step creates it again
    (``CREATE OR REPLACE``), then update this digest."""
    digest = hashlib.sha256(wq.CREATE_RECORD_OUTCOME_FUNCTION.encode()).hexdigest()[:16]
    assert (digest, SCHEMA_VERSION) == ("4a29ad2abe851a9f", 15)


def test_the_plan_a_connection_keeps_reads_each_row_by_its_key(
    direct_store: PostgresStore, pg_dsn: str
) -> None:
    # From its sixth run a prepared statement (or the function's) keeps a generic plan, made
    # for any values: one that scanned targets whole would cost each outcome the table's size.
    caps = {"ttl": TTL, "targets_per_job": 32, "jobs_per_caller": 1, "jobs_total": 20}
    for n in range(20):
        targets = [Target(f"https://c{n}.test/{i}") for i in range(32)]
        job, _ = direct_store.create_job(NewJob(f"c{n}", "user", targets, **caps), now=T0)
    values = direct_store._outcome_values(
        OutcomeWrite(job.id, 3, result=Result("x")), ttl=TTL, now=T0 + 1
    )
    types = [type_ for _, type_ in wq._OUTCOME_ARGS]
    names = [name for name, _ in wq._OUTCOME_ARGS]
    place = {name: i for i, name in enumerate(names, 1)}
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${place[m.group(1)]}", wq.RECORD_OUTCOME)
    statements = [(numbered, names, types)]
    plans = []
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for k, (sql, names, kinds) in enumerate(statements):
            conn.execute(f"PREPARE record{k} ({', '.join(kinds)}) AS {sql}")
            explain = f"EXPLAIN EXECUTE record{k} (" + ", ".join(["%s"] * len(names)) + ")"
            params = [values[n] for n in names]
            cur = psycopg.ClientCursor(conn).execute(explain, params)
            plans.append("\n".join(row[0] for row in cur.fetchall()))
    # But runners: a row per runner, read only by the outcome that ends a job (v12).
    assert all("Seq Scan" not in p.replace("Seq Scan on runners", "") for p in plans), plans
    assert {"jobs_pkey", "targets_pkey", "outbox_pkey"} <= set(plans[0].replace("\n", " ").split())


def test_through_a_pooler_the_write_is_the_function(
    store: PostgresStore, dsn: str, pg_dsn: str
) -> None:
    store.connection()
    assert store.pooled is (dsn != pg_dsn)
    assert store._outcome_sql == (wq.RECORD_OUTCOME_CALL if store.pooled else wq.RECORD_OUTCOME)


def test_the_terminal_status_sql_is_final_status(store: PostgresStore) -> None:
    """The SQL CASE the write sets the status with agrees with the model's rule everywhere."""
    cases = [(total, failed) for total in range(1, 8) for failed in range(total + 1)]
    sql = "SELECT " + wq.final_status_case("%(total)s::integer", "%(failed)s::integer")
    conn = store.connection()
    for total, failed in cases:
        row = conn.execute(sql, {"total": total, "failed": failed}).fetchone()
        assert row is not None
        assert row[0] == final_status(total, failed).value, (total, failed)


@pytest.mark.parametrize("failures", [0, 1, 2, 3])
def test_the_last_outcome_sets_the_models_final_status(store: PostgresStore, failures: int) -> None:
    job = create(store, "a", 3)
    answers = store.record_outcomes(
        [
            OutcomeWrite(job.id, i, error="boom")
            if i < failures
            else OutcomeWrite(job.id, i, result=Result("ok"))
            for i in range(3)
        ],
        ttl=TTL,
        now=T0 + 1,
    )
    statuses = [a.status for a in answers if isinstance(a, Job)]
    assert statuses == [JobState.RUNNING, JobState.RUNNING, final_status(3, failures)]


# A refused write in a shared commit changes nothing: test_group_commit.py, on every backend.


def test_a_write_for_another_runners_job_changes_nothing(dsn: str) -> None:
    with _runner_store(dsn) as mine, _runner_store(dsn) as theirs:
        ours = create(mine, "ours", 2)
        other = create(theirs, "theirs", 2)
        before = stored_row(mine, other.id)
        answers = mine.record_outcomes(
            [OutcomeWrite(other.id, 0, result=Result("x")), OutcomeWrite(ours.id, 0, error="e")],
            **_at(T0 + 1),
        )
        assert answers[0] is None
        assert isinstance(answers[1], Job) and answers[1].targets_failed == 1
        assert stored_row(mine, other.id) == before


def test_a_cancelled_job_stays_cancelled_when_its_last_outcome_lands(store: PostgresStore) -> None:
    job = create(store, "a", 1)
    assert store.finish_job(job.id, JobState.CANCELLED, now=T0 + 1) is not None
    [answer] = store.record_outcomes([OutcomeWrite(job.id, 0, result=Result("late"))], **_at(T0))
    assert isinstance(answer, Job)
    assert (answer.status, answer.targets_done) == (JobState.CANCELLED, 1)
    assert stored_row(store, job.id)[0] == "cancelled"


def test_values_the_database_refuses_fail_that_write_alone(store: PostgresStore) -> None:
    """Too many attempts for the integer column: the server aborts the transaction; the batch
    is made again without that write, and the others are stored once each."""
    a = create(store, "a", 2)
    b = create(store, "b", 2)
    answers = store.record_outcomes(
        [
            OutcomeWrite(a.id, 0, result=Result("a0")),
            OutcomeWrite(b.id, 0, result=Result("b0"), attempts=2**31),
            OutcomeWrite(a.id, 1, result=Result("a1")),
        ],
        **_at(T0 + 1),
    )
    assert isinstance(answers[0], Job) and answers[0].targets_done == 1
    assert isinstance(answers[1], StoreError) and "refused this outcome" in str(answers[1])
    assert isinstance(answers[2], Job) and answers[2].status == JobState.DONE
    assert stored_row(store, a.id)[:3] == ("done", 2, 0)
    assert stored_row(store, b.id)[:3] == ("running", 0, 0)
    # Alone (autocommit), the same write answers the same, and b takes its outcome after.
    [alone] = store.record_outcomes(
        [OutcomeWrite(b.id, 0, result=Result("b0"), attempts=2**31)], **_at(T0 + 2)
    )
    assert isinstance(alone, StoreError)
    [fine] = store.record_outcomes([OutcomeWrite(b.id, 0, result=Result("b0"))], **_at(T0 + 2))
    assert isinstance(fine, Job) and fine.targets_done == 1


def test_a_retried_write_whose_first_attempt_committed_answers_the_job(
    store: PostgresStore,
) -> None:
    """After a commit cut off by a lost connection the store keeps the writes as maybe
    committed (``_maybe_committed``, as ``record_outcomes`` sets it when the connection drops);
    a retry that finds its very outcome stored answers the job, counted once."""
    job = create(store, "a", 2)
    write = OutcomeWrite(job.id, 0, error="boom", hint="h", attempts=3)
    store.record_outcomes([write], **_at(T0 + 1))
    after_first = stored_row(store, job.id)
    store._maybe_committed.add((job.id, 0))

    [retried] = store.record_outcomes([write], **_at(T0 + 2))
    assert isinstance(retried, Job)
    assert (retried.targets_done, retried.targets_failed) == (1, 1)
    assert stored_row(store, job.id) == after_first  # nothing written twice
    assert (job.id, 0) not in store._maybe_committed  # answered: no longer in doubt

    # A different outcome for that target is still refused, in doubt or not.
    store._maybe_committed.add((job.id, 0))
    [other] = store.record_outcomes([OutcomeWrite(job.id, 0, error="other")], **_at(T0 + 2))
    assert isinstance(other, OutcomeExists)
    assert stored_row(store, job.id) == after_first


def _at(now: float) -> dict[str, float]:
    return {"ttl": TTL, "now": now}


@contextlib.contextmanager
def _runner_store(dsn: str) -> Iterator[PostgresStore]:
    """A store registered as a runner: its jobs are owned, its writes fenced."""
    store = PostgresStore.open(dsn)
    try:
        store.runner_id = store.register_runner()
        yield store
    finally:
        store.close()


@pytest.fixture
def pipelines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the pipelines of outcome writes the store sends (one entry each); a submit's
    are not counted."""
    opened: list[int] = []
    real = PostgresStore._record_pipelined

    def counting(self: PostgresStore, *args: Any) -> Any:
        opened.append(1)
        return real(self, *args)

    monkeypatch.setattr(PostgresStore, "_record_pipelined", counting)
    return opened


def test_a_batch_goes_out_in_one_pipeline_and_each_write_gets_its_answer(
    store: PostgresStore, pipelines: list[int]
) -> None:
    """Several writes are sent together (pipeline mode), not each after the answer to the one
    before; every answer is still the write's own: a job, OutcomeExists, None, a ValueError."""
    a = create(store, "a", 2)
    b = create(store, "b", 1)
    store.record_outcomes([OutcomeWrite(a.id, 0, result=Result("a0"))], **_at(T0))
    assert pipelines == []  # one write alone: one statement, nothing to pipeline
    answers = store.record_outcomes(
        [
            OutcomeWrite(a.id, 0, result=Result("again")),  # stored already
            OutcomeWrite(b.id, 0, error="boom"),
            OutcomeWrite("unknown-job-id-0000000", 0, result=Result("x")),
            OutcomeWrite(a.id, 1, result=Result("a1")),
            OutcomeWrite(a.id, 1),  # neither a result nor an error
        ],
        **_at(T0 + 1),
    )
    assert pipelines == [1]
    assert isinstance(answers[0], OutcomeExists)
    assert isinstance(answers[1], Job) and answers[1].status == JobState.FAILED
    assert answers[2] is None
    assert isinstance(answers[3], Job) and (answers[3].status, answers[3].targets_done) == (
        JobState.DONE,
        2,
    )
    assert isinstance(answers[4], ValueError)
    assert stored_row(store, a.id)[:3] == ("done", 2, 0)
    assert stored_row(store, b.id)[:3] == ("failed", 1, 1)


def test_a_refused_value_in_a_pipeline_sends_the_batch_again_one_write_at_a_time(
    store: PostgresStore, pipelines: list[int]
) -> None:
    a = create(store, "a", 1)
    b = create(store, "b", 1)
    answers = store.record_outcomes(
        [
            OutcomeWrite(a.id, 0, result=Result("a0")),
            OutcomeWrite(b.id, 0, result=Result("b0"), attempts=2**31),
        ],
        **_at(T0 + 1),
    )
    assert pipelines == [1]  # tried together first, then one at a time
    assert isinstance(answers[0], Job) and answers[0].targets_done == 1
    assert isinstance(answers[1], StoreError) and "refused this outcome" in str(answers[1])
    assert stored_row(store, a.id)[:3] == ("done", 1, 0)  # stored once
    assert stored_row(store, b.id)[:3] == ("running", 0, 0)


def test_a_batch_with_a_write_in_doubt_goes_one_write_at_a_time(
    store: PostgresStore, pipelines: list[int]
) -> None:
    """A retry in doubt may need its stored outcome read before its answer is known."""
    a = create(store, "a", 1)
    b = create(store, "b", 1)
    write = OutcomeWrite(a.id, 0, result=Result("a0"))
    store.record_outcomes([write], **_at(T0))
    store._maybe_committed.add((a.id, 0))
    answers = store.record_outcomes(
        [write, OutcomeWrite(b.id, 0, result=Result("b0"))], **_at(T0 + 1)
    )
    assert pipelines == []
    assert isinstance(answers[0], Job) and answers[0].targets_done == 1  # recognised, once
    assert isinstance(answers[1], Job) and answers[1].targets_done == 1


def _idle(store: PostgresStore) -> bool:
    """The store's connection is open and in no transaction (nothing left half done)."""
    return store.connection().info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@pytest.mark.parametrize(
    "refused",
    [{0}, {2}, {4}, {0, 4}, {1, 2, 3}, {0, 1, 2, 3, 4}],
    ids=["first", "middle", "last", "first-and-last", "three", "all"],
)
def test_refused_values_anywhere_in_a_pipeline_fail_those_writes_alone(
    store: PostgresStore,
    pipelines: list[int],
    refused: set[int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="psycopg")
    jobs = [create(store, caller, 1) for caller in "abcde"]
    writes = [
        OutcomeWrite(job.id, 0, result=Result("r"), attempts=2**31 if i in refused else 1)
        for i, job in enumerate(jobs)
    ]
    answers = store.record_outcomes(writes, **_at(T0 + 1))
    assert pipelines == [1]
    for i, (job, answer) in enumerate(zip(jobs, answers, strict=True)):
        if i in refused:
            assert isinstance(answer, StoreError) and "refused this outcome" in str(answer)
            assert stored_row(store, job.id)[:3] == ("running", 0, 0)
        else:
            assert isinstance(answer, Job) and answer.targets_done == 1
            assert stored_row(store, job.id)[:3] == ("done", 1, 0)
    assert _idle(store)
    # Regression: psycopg logged "error ignored terminating Pipeline ... pipeline aborted" as a
    # warning for each refusal, which the store handles.
    assert _psycopg_warnings(caplog) == []


def test_a_refusal_read_while_the_pipeline_is_still_sending_is_told_apart_too(
    store: PostgresStore,
    pipelines: list[int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """psycopg reads answers that have arrived whenever it sends: a refusal can be raised by
    a later write's execute, not by a fetch. Here the server's refusal of the first write is
    waited for before the second is sent, so it is always read there."""
    caplog.set_level(logging.WARNING, logger="psycopg")
    jobs = [create(store, caller, 1) for caller in "abc"]
    writes = [
        OutcomeWrite(job.id, 0, result=Result("r"), attempts=2**31 if i == 0 else 1)
        for i, job in enumerate(jobs)
    ]
    conn = store.connection()
    real_values = PostgresStore._outcome_values
    seen: list[OutcomeWrite] = []

    def values_after_the_refusal(self: PostgresStore, write: OutcomeWrite, **kw: Any) -> Any:
        seen.append(write)
        if len(seen) == 2 and conn._pipeline is not None:  # the first write is sent
            # Bounded only so a broken server cannot hang the suite; not a speed assertion.
            assert select.select([conn.fileno()], [], [], 30)[0], "the refusal never came"
        return real_values(self, write, **kw)

    raised_by_a_send: list[type[Exception]] = []
    real_execute = psycopg.Connection.execute

    def execute(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return real_execute(self, *args, **kwargs)
        except psycopg.Error as exc:
            if self._pipeline is not None:
                raised_by_a_send.append(type(exc))
            raise

    monkeypatch.setattr(PostgresStore, "_outcome_values", values_after_the_refusal)
    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    answers = store.record_outcomes(writes, **_at(T0 + 1))
    assert pipelines == [1]
    assert raised_by_a_send == [psycopg.errors.NumericValueOutOfRange]  # by the second send
    assert isinstance(answers[0], StoreError)
    assert all(isinstance(a, Job) and a.targets_done == 1 for a in answers[1:])
    assert _idle(store)
    assert _psycopg_warnings(caplog) == []


def _psycopg_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]


@pytest.mark.parametrize("cut", ["sending", "committing", "answering"])
def test_a_connection_lost_mid_pipeline_leaves_the_writes_in_doubt_and_a_retry_stores_each_once(
    direct_store: PostgresStore,
    pg_dsn: str,
    pipelines: list[int],
    monkeypatch: pytest.MonkeyPatch,
    cut: str,
) -> None:
    """The server ends the store's connection (pg_terminate_backend, as a restart does) while
    the writes are being sent, or once they all are, before COMMIT: the call fails, nothing
    is stored, every write is kept as maybe committed, and the retry goes one write at a
    time. Once their answers are being read, COMMIT went out with them: the call either had
    every answer already (it succeeds) or fails with the writes in doubt, committed or not;
    either way, after the retry each outcome is stored and counted once."""
    store = direct_store
    a = create(store, "a", 2)
    b = create(store, "b", 1)
    writes = [
        OutcomeWrite(a.id, 0, result=Result("a0")),
        OutcomeWrite(a.id, 1, error="boom"),
        OutcomeWrite(b.id, 0, result=Result("b0")),
    ]
    pid = store.connection().info.backend_pid
    cuts: list[str] = []

    def cut_off(where: str) -> None:
        if where == cut and not cuts:
            cuts.append(where)
            with psycopg.connect(pg_dsn, autocommit=True) as admin:
                # Waits (up to 10 s) until the server process is gone.
                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))

    real_values, real_execute = PostgresStore._outcome_values, psycopg.Connection.execute

    def values(self: PostgresStore, write: OutcomeWrite, **kw: Any) -> Any:
        if write is writes[1]:
            cut_off("sending")  # the first write is sent
        return real_values(self, write, **kw)

    def execute(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if query == "COMMIT" and self._pipeline is not None:
            cut_off("committing")  # every write is sent, no answer read; COMMIT comes next
        return real_execute(self, query, *args, **kwargs)

    def answer(write: OutcomeWrite, row: Any) -> Any:
        cut_off("answering")  # the first answer is read
        return real_answer(write, row)

    real_answer = _outcomes._outcome_answer
    monkeypatch.setattr(PostgresStore, "_outcome_values", values)
    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    monkeypatch.setattr(_outcomes, "_outcome_answer", answer)

    try:
        first: list[Any] | None = store.record_outcomes(writes, **_at(T0 + 1))
    except StoreUnavailable as exc:
        assert isinstance(exc.__cause__, psycopg.OperationalError)
        first = None
    assert cuts == [cut]
    if first is not None:  # every answer had come before the server process went
        assert cut == "answering"
        assert [a.targets_done for a in first if isinstance(a, Job)] == [1, 2, 1]
    else:
        assert store._conn is None  # dropped: the next call reconnects
        assert store._maybe_committed == {(w.job_id, w.idx) for w in writes}
        committed = stored_row(store, a.id)[:3] != ("running", 0, 0)
        assert not committed or cut == "answering"  # COMMIT was not sent before
        opened = len(pipelines)
        answers = store.record_outcomes(writes, **_at(T0 + 2))
        assert len(pipelines) == opened  # in doubt: one write at a time
        # A write found stored by its first attempt answers the job as it is now.
        done = [a.targets_done for a in answers if isinstance(a, Job)]
        assert done == ([2, 2, 1] if committed else [1, 2, 1])
    assert stored_row(store, a.id)[:3] == ("partial", 2, 1)
    assert stored_row(store, b.id)[:3] == ("done", 1, 0)
    assert store._maybe_committed == set()
    assert _idle(store)
