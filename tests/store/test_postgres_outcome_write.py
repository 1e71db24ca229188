"""PostgreSQL's outcome write: a shared commit's outcomes in one statement.

The writes are one data-modifying statement (``RECORD_OUTCOMES``, through its function) that
stores each target only if it is pending and its job unexpired and this runner's, bumps each
job and sets its terminal status with its last outcome. A refused write changes nothing and
raises nothing; values the database refuses abort the statement, which is then sent again a
write at a time, in one transaction. On a real throw-away server (see pg_server.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
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
from trio_batch.store.postgres import SCHEMA_VERSION, PostgresStore
from trio_batch.store.postgres import _outcome_queries as wq
from trio_batch.store.postgres._batch import OutcomeBatch

from ..support.fakes import T0
from ..support.markers import PGBOUNCER
from ..support.pg_versions import back_to_v15
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
    """The outcome write is a function the schema migration creates: once RECORD_OUTCOMES
    (or the function around it) changes, a database migrated earlier still runs the old one.
    Change it only with a new schema version whose step creates it again (``CREATE OR
    REPLACE``), then update this digest."""
    digest = hashlib.sha256(wq.CREATE_RECORD_OUTCOMES_FUNCTION.encode()).hexdigest()[:16]
    assert (digest, SCHEMA_VERSION) == ("f595ba96bab9c600", 17)


def test_a_batch_reads_each_row_by_its_key(direct_store: PostgresStore, pg_dsn: str) -> None:
    # The function plans each call for its values and the tables as they are: a few writes
    # among many jobs. Sequential scans off: each arm can reach its rows by key, which the
    # planner takes once a table is larger than a few pages.
    caps = {"ttl": TTL, "targets_per_job": 32, "jobs_per_caller": 1, "jobs_total": 20}
    jobs = []
    for n in range(20):
        targets = [Target(f"https://c{n}.test/{i}") for i in range(32)]
        jobs.append(direct_store.create_job(NewJob(f"c{n}", "user", targets, **caps), now=T0)[0])
    writes = [OutcomeWrite(job.id, 3, result=Result("x")) for job in jobs[:3]]
    params = direct_store._outcomes_params(OutcomeBatch.of(writes).sent, ttl=TTL, now=T0 + 1)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        types = dict(wq.OUTCOMES_ARGS)  # the function's argument types, as it binds them
        sql = re.sub(r"%\((\w+)\)s", lambda m: f"{m[0]}::{types[m[1]]}", wq.RECORD_OUTCOMES)
        cur = psycopg.ClientCursor(conn).execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cur.fetchall())
    # But runners: a row per runner, read only by the outcome that ends a job.
    assert "Seq Scan" not in plan.replace("Seq Scan on runners", ""), plan
    assert {"jobs_pkey", "targets_pkey", "outbox_pkey"} <= set(plan.split()), plan


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
def statements(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the outcome statements the store sends (the number of writes in each), however
    they go out: alone or inside a transaction, prepared or bound on the client."""
    sent: list[int] = []

    def counting(real: Any) -> Any:
        def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            if isinstance(query, str) and wq.RECORD_OUTCOMES_CALL in query:
                sent.append(len(params["job_ids"]))
            return real(self, query, params, **kwargs)

        return execute

    monkeypatch.setattr(psycopg.Connection, "execute", counting(psycopg.Connection.execute))
    monkeypatch.setattr(psycopg.ClientCursor, "execute", counting(psycopg.ClientCursor.execute))
    return sent


def test_a_batch_is_one_statement_and_each_write_gets_its_answer(
    store: PostgresStore, statements: list[int]
) -> None:
    """Every answer is still the write's own: a job, OutcomeExists, None, a ValueError."""
    a = create(store, "a", 2)
    b = create(store, "b", 1)
    store.record_outcomes([OutcomeWrite(a.id, 0, result=Result("a0"))], **_at(T0))
    answers = store.record_outcomes(
        [
            OutcomeWrite(a.id, 0, result=Result("again")),  # stored already
            OutcomeWrite(b.id, 0, error="boom"),
            OutcomeWrite("unknown-job-id-0000000", 0, result=Result("x")),
            OutcomeWrite(a.id, 1, result=Result("a1")),
            OutcomeWrite(a.id, 1),  # neither a result nor an error: not sent
        ],
        **_at(T0 + 1),
    )
    assert statements == [1, 4]
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


def test_a_target_written_twice_in_a_batch_is_stored_once(
    store: PostgresStore, statements: list[int]
) -> None:
    a = create(store, "a", 1)
    answers = store.record_outcomes(
        [
            OutcomeWrite(a.id, 0, result=Result("first")),
            OutcomeWrite(a.id, 0, result=Result("second")),
            OutcomeWrite("unknown-job-id-0000000", 0, result=Result("x")),
            OutcomeWrite("unknown-job-id-0000000", 0, result=Result("x")),
        ],
        **_at(T0 + 1),
    )
    assert statements == [2]  # each target sent once
    assert isinstance(answers[0], Job) and answers[0].targets_done == 1
    assert isinstance(answers[1], OutcomeExists)
    assert answers[2] is None and answers[3] is None
    assert stored_row(store, a.id)[:3] == ("done", 1, 0)
    assert stored_row(store, a.id)[-1][0][1] == Result("first").to_json_text()


def _idle(store: PostgresStore) -> bool:
    """The store's connection is open and in no transaction (nothing left half done)."""
    return store.connection().info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@pytest.mark.parametrize(
    "refused",
    [{0}, {2}, {4}, {0, 4}, {1, 2, 3}, {0, 1, 2, 3, 4}],
    ids=["first", "middle", "last", "first-and-last", "three", "all"],
)
def test_refused_values_anywhere_in_a_batch_fail_those_writes_alone(
    store: PostgresStore, statements: list[int], refused: set[int]
) -> None:
    jobs = [create(store, caller, 1) for caller in "abcde"]
    writes = [
        OutcomeWrite(job.id, 0, result=Result("r"), attempts=2**31 if i in refused else 1)
        for i, job in enumerate(jobs)
    ]
    answers = store.record_outcomes(writes, **_at(T0 + 1))
    assert statements == [5, 1, 1, 1, 1, 1]  # together first, then each alone
    for i, (job, answer) in enumerate(zip(jobs, answers, strict=True)):
        if i in refused:
            assert isinstance(answer, StoreError) and "refused this outcome" in str(answer)
            assert stored_row(store, job.id)[:3] == ("running", 0, 0)
        else:
            assert isinstance(answer, Job) and answer.targets_done == 1
            assert stored_row(store, job.id)[:3] == ("done", 1, 0)
    assert _idle(store)


def test_a_retry_in_doubt_in_a_batch_is_recognised_beside_the_others(
    store: PostgresStore, statements: list[int]
) -> None:
    a = create(store, "a", 1)
    b = create(store, "b", 1)
    write = OutcomeWrite(a.id, 0, result=Result("a0"))
    store.record_outcomes([write], **_at(T0))
    store._maybe_committed.add((a.id, 0))
    answers = store.record_outcomes(
        [write, OutcomeWrite(b.id, 0, result=Result("b0"))], **_at(T0 + 1)
    )
    assert statements == [1, 2]
    assert isinstance(answers[0], Job) and answers[0].targets_done == 1  # recognised, once
    assert isinstance(answers[1], Job) and answers[1].targets_done == 1


@pytest.mark.parametrize("cut", ["before it is sent", "after it committed"])
def test_a_connection_lost_around_the_statement_leaves_the_writes_in_doubt_and_a_retry_stores_each_once(  # noqa: E501
    direct_store: PostgresStore, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    """The server ends the store's connection (pg_terminate_backend, as a restart does) just
    before the statement goes out, or once it has committed and before its answer is taken:
    the call fails with every write kept as maybe committed, and after the retry each outcome
    is stored and counted once, a write found stored answering the job as it is now."""
    store = direct_store
    a = create(store, "a", 2)
    b = create(store, "b", 1)
    writes = [
        OutcomeWrite(a.id, 0, result=Result("a0")),
        OutcomeWrite(a.id, 1, error="boom"),
        OutcomeWrite(b.id, 0, result=Result("b0")),
    ]
    pid = store.connection().info.backend_pid
    real = PostgresStore._one
    cuts: list[str] = []

    def terminate() -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            # Waits (up to 10 s) until the server process is gone.
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))

    def cut_off(self: PostgresStore, conn: Any, op: Any, sql: str, params: Any = None) -> Any:
        if sql != wq.RECORD_OUTCOMES_CALL or cuts:
            return real(self, conn, op, sql, params)
        cuts.append(cut)
        if cut == "before it is sent":
            self._sent_write = True  # as _one marks a write before it goes out
            terminate()
            return real(self, conn, op, sql, params)
        real(self, conn, op, sql, params)
        terminate()
        return conn.execute("SELECT 1")  # the answer is taken on a connection now gone

    monkeypatch.setattr(PostgresStore, "_one", cut_off)
    with pytest.raises(StoreUnavailable) as lost:
        store.record_outcomes(writes, **_at(T0 + 1))
    assert isinstance(lost.value.__cause__, psycopg.OperationalError)
    assert cuts == [cut]
    assert store._conn is None  # dropped: the next call reconnects
    assert store._maybe_committed == {(w.job_id, w.idx) for w in writes}
    committed = cut == "after it committed"
    assert (stored_row(store, a.id)[:3] != ("running", 0, 0)) is committed
    answers = store.record_outcomes(writes, **_at(T0 + 2))
    done = [x.targets_done for x in answers if isinstance(x, Job)]
    assert done == ([2, 2, 1] if committed else [1, 2, 1])
    assert stored_row(store, a.id)[:3] == ("partial", 2, 1)
    assert stored_row(store, b.id)[:3] == ("done", 1, 0)
    assert store._maybe_committed == set()
    assert _idle(store)


def test_a_write_stored_in_the_refused_values_fallback_is_not_lost_when_a_later_one_fails(
    dsn: str, pg_dsn: str
) -> None:
    """The database refuses one write's values, so the writes are sent again one at a time;
    one of those then fails (a lock another session holds on its target outlasts the lock
    bound) and the call raises StoreUnavailable. A write the fallback already stored must not
    answer its retry with OutcomeExists (a drain fails its job on that): the fallback is one
    transaction, or its writes are in doubt."""
    with contextlib.closing(PostgresStore.open(dsn, store_timeout=1.0)) as store:
        a = create(store, "a", 1)
        b = create(store, "b", 1)
        c = create(store, "c", 1)
        writes = [
            OutcomeWrite(a.id, 0, result=Result("a0"), attempts=2**31),  # refused
            OutcomeWrite(b.id, 0, result=Result("b0")),
            OutcomeWrite(c.id, 0, result=Result("c0")),  # its target locked: times out
        ]
        with psycopg.connect(pg_dsn) as locker:  # a transaction holding c's target row
            locker.execute("SELECT 1 FROM targets WHERE job_id = %s FOR UPDATE", (c.id,))
            with pytest.raises(StoreUnavailable) as failed:
                store.record_outcomes(writes, **_at(T0 + 1))
            assert isinstance(failed.value.__cause__, psycopg.errors.LockNotAvailable)
            locker.rollback()
        answers = store.record_outcomes(writes[1:], **_at(T0 + 2))
        assert [type(x) for x in answers] == [Job, Job], answers
        assert [x.status for x in answers if isinstance(x, Job)] == [JobState.DONE] * 2
        assert stored_row(store, b.id)[:3] == ("done", 1, 0)
        assert stored_row(store, c.id)[:3] == ("done", 1, 0)
        assert _idle(store)


def test_writes_committed_before_their_retry_recognition_fails_are_kept_in_doubt(
    dsn: str, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch with a retry in doubt commits, then the read that recognises the retry fails
    without losing the connection (a lock held past the read's bound): the call raises
    though every write of it committed. Each must be kept in doubt, so that its retry finds
    its outcome stored and answers the job, not OutcomeExists."""
    with contextlib.closing(PostgresStore.open(dsn, store_timeout=1.0)) as store:
        a = create(store, "a", 1)
        b = create(store, "b", 1)
        retried = OutcomeWrite(a.id, 0, result=Result("a0"))
        store.record_outcomes([retried], **_at(T0))
        store._maybe_committed.add((a.id, 0))  # as a commit cut off leaves it
        writes = [retried, OutcomeWrite(b.id, 0, result=Result("b0"))]
        real = PostgresStore._recognise_retries
        with psycopg.connect(pg_dsn) as locker:

            def locked_out(self: PostgresStore, *args: Any) -> None:
                # After the commit: DDL elsewhere holds the table the read needs.
                locker.execute("LOCK TABLE targets IN ACCESS EXCLUSIVE MODE")
                real(self, *args)

            monkeypatch.setattr(PostgresStore, "_recognise_retries", locked_out)
            with pytest.raises(StoreUnavailable) as failed:
                store.record_outcomes(writes, **_at(T0 + 1))
            # Lock and statement bounds are equal for a read: either may end it.
            timed_out = (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled)
            assert isinstance(failed.value.__cause__, timed_out)
            locker.rollback()
        monkeypatch.setattr(PostgresStore, "_recognise_retries", real)
        assert stored_row(store, b.id)[:3] == ("done", 1, 0)  # committed before the read
        answers = store.record_outcomes(writes, **_at(T0 + 2))
        assert [type(x) for x in answers] == [Job, Job], answers
        assert store._maybe_committed == set()
        assert _idle(store)


def test_a_recognised_retry_does_not_count_its_job_finished_twice(store: PostgresStore) -> None:
    """A retry in doubt is recognised and answers the job as it is now: ended, if a later
    write of its batch ended it. The counts this store keeps of the jobs it finished must
    count that job once (``counts`` reuses its tally of terminal jobs)."""
    job = create(store, "a", 2)
    first = OutcomeWrite(job.id, 0, result=Result("a0"))
    store.record_outcomes([first], **_at(T0))
    store._maybe_committed.add((job.id, 0))  # as a commit cut off leaves it
    assert store.counts(now=T0 + 1).jobs["done"] == 0  # the tally, now held
    answers = store.record_outcomes(
        [first, OutcomeWrite(job.id, 1, result=Result("a1"))], **_at(T0 + 1)
    )
    assert [x.status for x in answers if isinstance(x, Job)] == [JobState.DONE] * 2
    assert store.counts(now=T0 + 2).jobs["done"] == 1


def test_an_outcome_landing_on_a_job_failed_before_does_not_count_it_again(
    store: PostgresStore,
) -> None:
    """A job its drain failed (``finish_job``) is counted finished then; an outcome still in
    flight that lands after, its last, leaves it failed and must not count it again."""
    job = create(store, "a", 1)
    assert store.counts(now=T0 + 1).jobs["failed"] == 0  # the tally, now held
    assert store.finish_job(job.id, JobState.FAILED, error="gave up", now=T0 + 1) is not None
    [late] = store.record_outcomes([OutcomeWrite(job.id, 0, error="late")], **_at(T0 + 1))
    assert isinstance(late, Job) and (late.status, late.targets_done) == (JobState.FAILED, 1)
    assert store.counts(now=T0 + 2).jobs["failed"] == 1


def test_an_outcome_landing_on_a_cancelled_job_shows_in_the_counts(store: PostgresStore) -> None:
    """A cancelled job's outcome in flight lands after the cancel: the counts of the
    terminal jobs (reused between reads) show it stored, not abandoned."""
    job = create(store, "a", 2)
    assert store.counts(now=T0 + 1).targets_done == 0  # the tally, now held
    assert store.finish_job(job.id, JobState.CANCELLED, now=T0 + 1) is not None
    [late] = store.record_outcomes([OutcomeWrite(job.id, 0, result=Result("r"))], **_at(T0 + 1))
    assert isinstance(late, Job) and (late.status, late.targets_done) == (JobState.CANCELLED, 1)
    counts = store.counts(now=T0 + 2)
    assert (counts.jobs["cancelled"], counts.targets_done, counts.targets_abandoned) == (1, 1, 1)


def test_a_target_written_again_after_the_database_refused_its_first_write_is_stored(
    store: PostgresStore,
) -> None:
    """Made one after another, the first write of a target fails (a value out of the
    column's range) and the second, a fine one, stores it: so in one batch too. A target
    stored once is still refused the second time."""
    a = create(store, "a", 1)
    b = create(store, "b", 1)
    answers = store.record_outcomes(
        [
            OutcomeWrite(a.id, 0, result=Result("first"), attempts=2**31),
            OutcomeWrite(a.id, 0, result=Result("second")),
            OutcomeWrite(b.id, 0, result=Result("b0")),
            OutcomeWrite(b.id, 0, result=Result("b0 again")),
        ],
        **_at(T0 + 1),
    )
    assert isinstance(answers[0], StoreError) and "refused this outcome" in str(answers[0])
    assert isinstance(answers[1], Job) and answers[1].status == JobState.DONE
    assert isinstance(answers[2], Job) and answers[2].status == JobState.DONE
    assert isinstance(answers[3], OutcomeExists)
    assert stored_row(store, a.id)[:3] == ("done", 1, 0)
    assert stored_row(store, b.id)[:3] == ("done", 1, 0)
    assert stored_row(store, a.id)[-1][0][1] == Result("second").to_json_text()
    assert _idle(store)


#: How a runner of schema 15 calls 15's one-outcome function (see ``back_to_v15``).
_V15_CALL = (
    "SELECT * FROM trio_batch_record_outcome(%(job_id)s::text, %(idx)s::integer, "
    "%(now)s::double precision, %(expires)s::double precision, %(runner)s::text, "
    "%(status)s::text, %(result)s::text, %(error)s::text, %(hint)s::text, "
    "%(attempts)s::integer, %(failed)s::integer, %(size)s::bigint)"
)


def test_a_runner_of_version_15_keeps_storing_outcomes_across_the_upgrade(pg_dsn: str) -> None:
    """A rolling upgrade: a runner started at schema 15 stores each outcome, through a
    pooler, by calling 15's one-outcome function. Another runner opens the database at 16
    and migrates it: the first one's next outcomes are stored as before, not refused for a
    function gone (its drains would fail their jobs)."""
    with contextlib.closing(PostgresStore.open(pg_dsn)) as store:
        job = create(store, "a", 2)
    back_to_v15(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as old:  # the runner of version 15

        def v15_outcome(idx: int) -> tuple[Any, ...] | None:
            values = {
                "job_id": job.id, "idx": idx, "now": T0 + 1, "expires": T0 + 1 + TTL,
                "runner": None, "status": "done", "result": "r", "error": None, "hint": None,
                "attempts": 1, "failed": 0, "size": 1,
            }  # fmt: skip
            return old.execute(_V15_CALL, values).fetchone()

        first = v15_outcome(0)
        assert first is not None and first[:2] == (True, job.id)
        with contextlib.closing(PostgresStore.open(pg_dsn)) as upgraded:  # migrates to 16
            version = upgraded.connection().execute("SELECT version FROM trio_batch_schema")
            assert version.fetchone() == (SCHEMA_VERSION,)
            last = v15_outcome(1)
            assert last is not None and last[:3] == (True, job.id, "done")
            assert stored_row(upgraded, job.id)[:3] == ("done", 2, 0)
