"""The PostgreSQL store's own behaviour, on a real throw-away server (see pg_server.py).

Several store objects stand for several runners: each has its own connection and thread, as
runners on different hosts do. What every backend must do alike is in the conformance suite.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator

import psycopg
import pytest
import trio

from trio_batch import (
    Busy,
    CallerBusy,
    Job,
    JobState,
    OutcomeWrite,
    Result,
    SchemaVersionError,
    StoreError,
    StoreUnavailable,
    open_store,
)
from trio_batch.store import DrainChanges, NewJob
from trio_batch.store.postgres import SCHEMA_VERSION, PostgresJobStore, PostgresStore
from trio_batch.store.postgres import _outcome_queries as wq
from trio_batch.store.postgres import _queries as q
from trio_batch.store.postgres._batch import OutcomeBatch

from ..support.fakes import T0, logged, urls
from ..support.pg_versions import back_to_v14, back_to_v15

TTL = 3600.0


def _caps(**overrides: int) -> dict[str, int]:
    caps = {"targets_per_job": 32, "jobs_per_caller": 1, "jobs_total": 8}
    caps.update(overrides)
    return caps


@pytest.fixture
async def stores(pg_dsn: str) -> AsyncIterator[list[PostgresJobStore]]:
    """Four stores on one database: four connections, as four runners would have."""
    opened = [PostgresJobStore.open(pg_dsn) for _ in range(4)]
    try:
        yield opened
    finally:
        for store in opened:
            await store.aclose()


def _sql(dsn: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run one statement on a connection of its own (the test's view of the database)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


async def test_open_store_takes_a_postgresql_url(pg_dsn: str) -> None:
    async with open_store(pg_dsn) as store:
        assert isinstance(store, PostgresJobStore)
        assert "password" not in store.location
        job, reused = await store.create_job(
            NewJob("alice", "user", urls("a"), ttl=TTL, **_caps()), now=T0
        )
        assert not reused
        stored = await store.record_outcome(
            OutcomeWrite(job.id, 0, result=Result("hello", {"n": 1})), ttl=TTL, now=T0 + 1
        )
        assert stored is not None and stored.status is JobState.DONE
        status = await store.get_status(job.id, now=T0 + 2)
        assert status is not None
        assert status[1][0].result == Result("hello", {"n": 1})
    async with open_store(pg_dsn.replace("postgresql://", "postgres://", 1)) as store:
        assert (await store.get_job(job.id, now=T0 + 2)) == stored


async def test_a_missing_driver_is_named_with_the_extra(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m.startswith("trio_batch.store.postgres")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ImportError
    with pytest.raises(StoreError, match=r"postgres extra"):
        open_store(pg_dsn)


async def test_caps_hold_across_runners_submitting_at_once(
    stores: list[PostgresJobStore], pg_dsn: str
) -> None:
    outcomes: list[str] = []

    async def submit(store: PostgresJobStore, caller: str) -> None:
        try:
            await store.create_job(
                NewJob(caller, "user", urls(caller), ttl=TTL, **_caps(jobs_total=5)), now=T0
            )
            outcomes.append("created")
        except Busy:
            outcomes.append("busy")

    async with trio.open_nursery() as nursery:
        for i in range(24):
            nursery.start_soon(submit, stores[i % len(stores)], f"caller{i}")
    assert outcomes.count("created") == 5
    assert outcomes.count("busy") == 19
    live = _sql(pg_dsn, "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')")
    assert live == [(5,)]


async def test_one_job_per_caller_and_targets_from_every_runner(
    stores: list[PostgresJobStore], pg_dsn: str
) -> None:
    answers: list[tuple[str, bool]] = []

    async def submit(store: PostgresJobStore) -> None:
        job, reused = await store.create_job(
            NewJob("alice", "user", urls("a", "b"), ttl=TTL, **_caps(jobs_per_caller=4)), now=T0
        )
        answers.append((job.id, reused))

    async with trio.open_nursery() as nursery:
        for i in range(16):
            nursery.start_soon(submit, stores[i % len(stores)])
    assert len({job_id for job_id, _ in answers}) == 1
    assert sorted(reused for _, reused in answers) == [False] + [True] * 15
    assert _sql(pg_dsn, "SELECT count(*) FROM jobs") == [(1,)]


async def test_the_per_caller_cap_holds_across_runners(stores: list[PostgresJobStore]) -> None:
    created = 0
    refused = 0

    async def submit(store: PostgresJobStore, i: int) -> None:
        nonlocal created, refused
        try:
            await store.create_job(
                NewJob("alice", "user", urls(f"t{i}"), ttl=TTL, **_caps(jobs_per_caller=2)), now=T0
            )
            created += 1
        except CallerBusy:
            refused += 1

    async with trio.open_nursery() as nursery:
        for i in range(12):
            nursery.start_soon(submit, stores[i % len(stores)], i)
    assert (created, refused) == (2, 10)


async def test_a_refusal_or_a_reuse_does_not_wait_for_the_creation_lock(
    stores: list[PostgresJobStore], pg_dsn: str
) -> None:
    # Under load most submits are refused: they are answered from a read, not queued behind
    # the cluster-wide lock every creation takes (held here by another session).
    store = stores[0]
    caps = _caps(jobs_per_caller=1, jobs_total=2)
    first, _ = await store.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **caps), now=T0)
    await store.create_job(NewJob("bob", "user", urls("b"), ttl=TTL, **caps), now=T0)
    with psycopg.connect(pg_dsn) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s, %s)", (q.LOCK_CLASS, q.LOCK_CREATE))
        with pytest.raises(CallerBusy) as busy:
            await store.create_job(NewJob("alice", "user", urls("c"), ttl=TTL, **caps), now=T0)
        assert busy.value.job_id == first.id
        with pytest.raises(Busy):
            await store.create_job(NewJob("carol", "user", urls("c"), ttl=TTL, **caps), now=T0)
        again, reused = await store.create_job(
            NewJob("alice", "user", urls("a"), ttl=TTL, **caps), now=T0
        )
        assert (again, reused) == (first, True)
        holder.rollback()
    await store.finish_job(first.id, JobState.CANCELLED, now=T0 + 1)
    created, reused = await store.create_job(
        NewJob("alice", "user", urls("c"), ttl=TTL, **caps), now=T0 + 1
    )
    assert not reused and created.status is JobState.QUEUED


def test_concurrent_first_use_creates_the_schema_once(pg_dsn: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def first_use() -> None:
        try:
            barrier.wait()
            PostgresStore.open(pg_dsn).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_use) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _sql(pg_dsn, "SELECT version FROM trio_batch_schema") == [(SCHEMA_VERSION,)]


def test_a_newer_schema_is_refused(pg_dsn: str) -> None:
    PostgresStore.open(pg_dsn).close()
    _sql(pg_dsn, "UPDATE trio_batch_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaVersionError, match="newer"):
        PostgresStore.open(pg_dsn)


def test_a_version_3_database_gets_the_trace_context_column(pg_dsn: str) -> None:
    PostgresStore.open(pg_dsn).close()
    # Back to version 3: the column the version 4 step adds is dropped (and version 5's tables).
    _sql(pg_dsn, "ALTER TABLE jobs DROP COLUMN trace_context")
    _sql(pg_dsn, "DROP TABLE host_slots, host_state")
    _sql(pg_dsn, "UPDATE trio_batch_schema SET version = 3")
    store = PostgresStore.open(pg_dsn)
    try:
        traced = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
        new = NewJob("alice", "user", urls("a"), ttl=TTL, **_caps(), trace_context=traced)
        store.create_job(new, now=T0)
    finally:
        store.close()
    assert _sql(pg_dsn, "SELECT version FROM trio_batch_schema") == [(SCHEMA_VERSION,)]
    assert _sql(pg_dsn, "SELECT trace_context FROM jobs") == [(traced,)]


def test_a_version_4_database_gets_the_shared_per_host_tables(pg_dsn: str) -> None:
    PostgresStore.open(pg_dsn).close()
    _sql(pg_dsn, "DROP TABLE host_slots, host_state")
    _sql(pg_dsn, "UPDATE trio_batch_schema SET version = 4")
    PostgresStore.open(pg_dsn).close()
    assert _sql(pg_dsn, "SELECT version FROM trio_batch_schema") == [(SCHEMA_VERSION,)]
    assert _sql(pg_dsn, "SELECT count(*) FROM host_slots") == [(0,)]
    assert _sql(pg_dsn, "SELECT count(*) FROM host_state") == [(0,)]


def test_a_version_15_database_gets_the_batch_outcome_function_beside_the_old(
    pg_dsn: str,
) -> None:
    PostgresStore.open(pg_dsn).close()
    _sql(pg_dsn, "DROP FUNCTION trio_batch_record_outcomes")
    back_to_v15(pg_dsn)  # with 15's one-outcome function, which runners of 15 still call
    PostgresStore.open(pg_dsn).close()
    assert _sql(pg_dsn, "SELECT version FROM trio_batch_schema") == [(SCHEMA_VERSION,)]
    functions = (
        "SELECT proname, proconfig FROM pg_proc WHERE proname LIKE 'trio_batch_record%%' "
        "ORDER BY proname"
    )
    # Planned for each call's values: a batch's size, the tables as they are then.
    assert _sql(pg_dsn, functions) == [
        ("trio_batch_record_outcome", None),
        ("trio_batch_record_outcomes", ["plan_cache_mode=force_custom_plan"]),
    ]


def _new(caller: str, *names: str) -> NewJob:
    return NewJob(caller, "user", urls(*names), ttl=TTL, **_caps())


def _ok(job_id: str, idx: int) -> OutcomeWrite:
    return OutcomeWrite(job_id, idx, result=Result("x", {}))


def test_a_version_6_database_holding_live_jobs_indexes_terminal_leases(pg_dsn: str) -> None:
    store = PostgresStore.open(pg_dsn)
    try:
        live, _ = store.create_job(_new("alice", "a", "b"), now=T0)
        idle, _ = store.create_job(_new("carol", "e"), now=T0)  # live, its lease never bumped
        done, _ = store.create_job(_new("bob", "c"), now=T0)
        store.record_outcomes([_ok(done.id, 0), _ok(live.id, 0)], ttl=TTL, now=T0 + 1)
    finally:
        store.close()
    # Back to version 6: the lease indexed for every job, no column of the terminal ones'.
    back_to_v14(pg_dsn)
    _sql(pg_dsn, "ALTER TABLE jobs DROP COLUMN terminal_expires_at")  # and its index
    _sql(pg_dsn, "CREATE INDEX jobs_expiry ON jobs (expires_at)")
    _sql(pg_dsn, "UPDATE trio_batch_schema SET version = 6")
    store = PostgresStore.open(pg_dsn)
    try:
        assert _sql(pg_dsn, "SELECT version FROM trio_batch_schema") == [(SCHEMA_VERSION,)]
        leases = "SELECT id, terminal_expires_at FROM jobs ORDER BY caller"
        assert _sql(pg_dsn, leases) == [(live.id, None), (done.id, T0 + 1 + TTL), (idle.id, None)]
        indexes = {row[0] for row in _sql(pg_dsn, "SELECT indexname FROM pg_indexes")}
        assert "jobs_terminal_expiry" in indexes and "jobs_expiry" not in indexes
        # The live job drains on; its last outcome indexes its lease.
        [job] = store.record_outcomes([_ok(live.id, 1)], ttl=TTL, now=T0 + 3)
        assert isinstance(job, Job) and job.status is JobState.DONE
        assert _sql(pg_dsn, leases)[0] == (live.id, T0 + 3 + TTL)
        # Lists and purges see live and terminal jobs alike, by lease.
        assert [j.id for j in store.list_jobs(now=T0 + 4)] == [live.id, done.id, idle.id]
        assert [j.id for j in store.list_jobs(now=T0 + 4, limit=2)] == [live.id, done.id]
        assert [j.id for j in store.list_jobs(now=T0 + 4, caller="carol")] == [idle.id]
        lapsed = T0 + 2 + TTL  # idle's lease (T0 + TTL) and done's (T0 + 1 + TTL) are over
        assert store.purge_expired(now=lapsed, batch_size=1) == 1
        assert {row[0] for row in _sql(pg_dsn, "SELECT id FROM jobs")} == {live.id, done.id}
        assert store.purge_expired(now=lapsed, batch_size=5) == 1
        assert [j.id for j in store.list_jobs(now=lapsed)] == [live.id]
    finally:
        store.close()


#: Updates and HOT updates of ``live_progress``, ``jobs`` and ``targets``, in this transaction.
_UPDATES = "SELECT " + ", ".join(
    f"pg_stat_get_xact_tuples_updated('{t}'::regclass), "
    f"pg_stat_get_xact_tuples_hot_updated('{t}'::regclass)"
    for t in ("live_progress", "jobs", "targets")
)


def test_an_outcome_updates_its_progress_row_in_place_and_the_job_row_once(pg_dsn: str) -> None:
    # Every outcome bumps the live job's narrow progress row, whose changed columns no index
    # covers: HOT (no index entry). The wide jobs row is written once, by the outcome that
    # ends the job; each target's own update is HOT too (no index covers its status).
    store = PostgresStore.open(pg_dsn)
    try:
        job, _ = store.create_job(_new("alice", "a", "b", "c"), now=T0)
        size = 0
        with psycopg.connect(pg_dsn) as conn:  # one transaction: its own counts
            for idx, jobs in ((0, 0), (1, 0), (2, 1)):
                values = store._outcomes_params(
                    OutcomeBatch.of([_ok(job.id, idx)]).sent, ttl=TTL, now=T0 + 1 + idx
                )
                size += values["sizes"][0]
                assert conn.execute(wq.RECORD_OUTCOMES_CALL, values).fetchone() is not None
                n = idx + 1
                assert conn.execute(_UPDATES).fetchone() == (n, n, jobs, 0, n, n)
        row = "SELECT status, targets_done, targets_failed, results_size, updated_at, "
        row += "expires_at FROM jobs WHERE id = %s"
        assert _sql(pg_dsn, row, (job.id,)) == [("done", 3, 0, size, T0 + 3, T0 + 3 + TTL)]
    finally:
        store.close()


def test_a_version_1_database_is_upgraded_in_place(pg_dsn: str) -> None:
    from trio_batch.store.postgres import _schema_queries as sq

    for statement in sq.CREATE_SCHEMA_V1:
        _sql(pg_dsn, statement)
    _sql(pg_dsn, sq.SET_VERSION, (1,))
    _sql(
        pg_dsn,
        "INSERT INTO jobs (id, status, targets_total, caller, caller_class, idem_key, "
        "created_at, updated_at, expires_at) VALUES ('old', 'done', 1, 'a', 'u', 'k', 1, 1, 9)",
    )
    _sql(pg_dsn, "INSERT INTO targets VALUES ('old', 0, 'https://a/', '{}', 'pending')")
    PostgresStore.open(pg_dsn).close()
    assert _sql(pg_dsn, "SELECT version FROM trio_batch_schema") == [(SCHEMA_VERSION,)]
    assert _sql(pg_dsn, "SELECT metadata, parent_id, trace_context FROM jobs") == [
        ("{}", None, None)
    ]
    assert _sql(pg_dsn, "SELECT custom_id FROM targets") == [(None,)]
    indexes = {row[0] for row in _sql(pg_dsn, "SELECT indexname FROM pg_indexes")}
    assert {
        "job_labels_filter",
        "jobs_caller_created",
        "jobs_caller_status_created",
        "jobs_parent",
    } <= indexes
    assert _sql(pg_dsn, "SELECT count(*) FROM job_labels") == [(0,)]


def test_a_database_with_foreign_tables_is_refused(pg_dsn: str) -> None:
    _sql(pg_dsn, "CREATE TABLE jobs (id int)")
    with pytest.raises(SchemaVersionError, match="not a trio_batch database"):
        PostgresStore.open(pg_dsn)
    assert _sql(pg_dsn, "SELECT to_regclass('trio_batch_schema') IS NULL") == [(True,)]


def _age_runner(dsn: str, runner_id: str | None) -> None:
    """Make ``runner_id`` look silent for an hour: what a SIGSTOP or a partition leaves."""
    assert runner_id is not None
    _sql(
        dsn,
        "UPDATE runners SET heartbeat_at = now() - interval '1 hour' WHERE id = %s",
        (runner_id,),
    )


async def test_a_reaped_runner_writes_nothing_into_its_old_jobs(
    stores: list[PostgresJobStore], pg_dsn: str
) -> None:
    a, b = stores[0], stores[1]
    async with a.claim(heartbeat_interval=60, runner_timeout=120):
        a_id = a.runner_id
        a_job, _ = await a.create_job(
            NewJob("alice", "user", urls("a", "b"), ttl=TTL, **_caps()), now=T0
        )
        stored = await a.record_outcome(
            OutcomeWrite(a_job.id, 0, result=Result("one")), ttl=TTL, now=T0 + 1
        )
        assert stored is not None and stored.targets_done == 1
        async with b.claim(heartbeat_interval=60, runner_timeout=120):
            b_job, _ = await b.create_job(
                NewJob("bob", "user", urls("c"), ttl=TTL, **_caps()), now=T0
            )
            assert await b.reap_orphans(now=T0 + 2) == []  # A is alive: nothing reaped
            _age_runner(pg_dsn, a_id)
            assert len(await b.reap_orphans(now=T0 + 3)) == 1
            reaped = await b.get_job(a_job.id, now=T0 + 4)
            assert reaped is not None
            assert (reaped.status, reaped.error, reaped.targets_done) == (
                JobState.FAILED,
                "restart",
                1,
            )
            # A comes back: its write is refused and changes nothing.
            late = await a.record_outcome(
                OutcomeWrite(a_job.id, 1, result=Result("two")), ttl=TTL, now=T0 + 5
            )
            assert late is None
            status = await b.get_status(a_job.id, now=T0 + 6)
            assert status is not None
            assert [t.status for t in status[1]] == ["done", "pending"]
            assert status[0] == reaped
            # B's job is untouched, and B's shutdown fails only its own.
            b_now = await b.get_job(b_job.id, now=T0 + 6)
            assert b_now is not None and b_now.status is JobState.QUEUED
            assert await a.fail_own_jobs("shutdown", now=T0 + 7) == 0
            b_now = await b.get_job(b_job.id, now=T0 + 7)
            assert b_now is not None and b_now.status is JobState.QUEUED
            assert await b.fail_own_jobs("shutdown", now=T0 + 8) == 1
    assert _sql(pg_dsn, "SELECT count(*) FROM runners") == [(0,)]


async def test_a_reaped_runner_creates_no_job_until_it_is_registered_again(
    stores: list[PostgresJobStore], pg_dsn: str
) -> None:
    a = stores[0]
    async with a.claim(heartbeat_interval=60, runner_timeout=120):
        # What another runner's reap does to A's registration while A is paused.
        _sql(pg_dsn, "DELETE FROM runners WHERE id = %s", (a.runner_id,))
        with pytest.raises(StoreUnavailable, match="taken for dead"):
            await a.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **_caps()), now=T0)
    assert _sql(pg_dsn, "SELECT count(*) FROM jobs") == [(0,)]


async def test_shutdown_fails_only_the_runners_own_jobs(stores: list[PostgresJobStore]) -> None:
    a, b = stores[0], stores[1]
    async with a.claim(), b.claim():
        a_job, _ = await a.create_job(
            NewJob("alice", "user", urls("a"), ttl=TTL, **_caps()), now=T0
        )
        b_job, _ = await b.create_job(NewJob("bob", "user", urls("b"), ttl=TTL, **_caps()), now=T0)
        assert await a.fail_own_jobs("shutdown", now=T0 + 1) == 1
        a_now = await b.get_job(a_job.id, now=T0 + 2)
        b_now = await b.get_job(b_job.id, now=T0 + 2)
    assert a_now is not None and (a_now.status, a_now.error) == (JobState.FAILED, "shutdown")
    assert b_now is not None and b_now.status is JobState.QUEUED


async def test_a_runner_reaped_while_silent_registers_again_under_a_new_id(
    stores: list[PostgresJobStore], pg_dsn: str
) -> None:
    a, b = stores[0], stores[1]
    async with a.claim(heartbeat_interval=0.2, runner_timeout=60):
        first_id = a.runner_id
        job, _ = await a.create_job(NewJob("alice", "user", urls("a"), ttl=TTL, **_caps()), now=T0)
        async with b.claim(heartbeat_interval=30, runner_timeout=60):
            with logged("this runner was reaped by another; registered again") as again:
                # What B's reap does to A's registration while A is silent (aging A instead
                # would race A's own next heartbeat, which would make it alive again).
                _sql(pg_dsn, "DELETE FROM runners WHERE id = %s", (first_id,))
                await again.wait()
            assert a.runner_id is not None and a.runner_id != first_id
            # The old job has no registered owner now: B's reap fails it (or A's own
            # heartbeat does, if it holds the reaper's lock at that moment).
            while (reaped := await a.get_job(job.id, now=T0 + 2)) and not reaped.is_terminal:
                await b.reap_orphans(now=T0 + 1)
        assert reaped is not None and (reaped.status, reaped.error) == (JobState.FAILED, "restart")
        # As the new runner it writes its new jobs as usual.
        fresh, _ = await a.create_job(
            NewJob("carol", "user", urls("c"), ttl=TTL, **_caps()), now=T0
        )
        done = await a.record_outcome(
            OutcomeWrite(fresh.id, 0, result=Result("x")), ttl=TTL, now=T0 + 3
        )
        assert done is not None and done.status is JobState.DONE
        # B has shut down; A's first registration is gone, its second stays until A's claim ends.
        assert _sql(pg_dsn, "SELECT id FROM runners") == [(a.runner_id,)]
    assert _sql(pg_dsn, "SELECT count(*) FROM runners") == [(0,)]


async def test_the_unique_index_refuses_a_second_current_job_of_a_key(
    stores: list[PostgresJobStore], pg_dsn: str
) -> None:
    # The second line of defence, for a writer that skipped the creation lock.
    job, _ = await stores[0].create_job(
        NewJob("alice", "user", urls("a"), ttl=TTL, **_caps()), now=T0
    )
    with pytest.raises(psycopg.errors.UniqueViolation):
        _sql(
            pg_dsn,
            "INSERT INTO jobs (id, status, targets_total, caller, caller_class, idem_key, "
            "created_at, updated_at, expires_at) "
            "SELECT 'B' || substr(id, 2), 'queued', 1, caller, caller_class, idem_key, "
            "created_at, updated_at, expires_at FROM jobs WHERE id = %s",
            (job.id,),
        )
    # Once the lease lapses, a new job of the key replaces it as current.
    later, reused = await stores[1].create_job(
        NewJob("alice", "user", urls("a"), ttl=TTL, **_caps(jobs_per_caller=2)), now=T0 + TTL + 1
    )
    assert not reused
    assert _sql(pg_dsn, "SELECT id FROM jobs WHERE current") == [(later.id,)]


async def test_a_runner_learns_of_cancels_and_reaps_by_others_and_waiters_of_its_drains(
    stores: list[PostgresJobStore], pg_dsn: str
) -> None:
    a, b = stores[0], stores[1]
    async with (
        a.claim(heartbeat_interval=60, runner_timeout=120),
        b.claim(heartbeat_interval=60, runner_timeout=120),
    ):
        assert a.can_start_target()  # its registration counts as a heartbeat
        one, _ = await a.create_job(
            NewJob("alice", "user", urls("a", "b"), ttl=TTL, **_caps()), now=T0
        )
        two, _ = await a.create_job(NewJob("carol", "user", urls("c"), ttl=TTL, **_caps()), now=T0)
        assert await a.drain_changes([one.id, two.id]) == DrainChanges()
        assert not await b.drain_over(one.id)  # A drains it
        assert await b.finish_job(one.id, JobState.CANCELLED, now=T0 + 1) is not None
        assert await a.drain_changes([one.id, two.id]) == DrainChanges(
            cancelled=frozenset({one.id})
        )
        assert not await b.drain_over(one.id)  # cancelled, but A's drain has not stopped yet
        assert await a.drain_over(one.id)  # A's own drains are A's to know about
        await a.release_job(one.id)
        assert await b.drain_over(one.id)
        # A is taken for dead: its live job is reaped, and A learns it lost it.
        a_id = a.runner_id
        _age_runner(pg_dsn, a_id)
        assert len(await b.reap_orphans(now=T0 + 2)) == 1
        assert await a.drain_changes([two.id]) == DrainChanges(lost=frozenset({two.id}))
        assert await b.drain_over(two.id)


async def test_undrained_jobs_are_a_runners_own_live_jobs_without_outcomes_oldest_first_bounded(
    stores: list[PostgresJobStore],
) -> None:
    # What the runner's poll adopts: its creates whose answer was lost. Not another runner's
    # job, nor one it drains, nor one with an outcome, nor a terminal or lapsed one; at most
    # ``limit``, the oldest first, each with its targets in order.
    a, b = stores[0], stores[1]
    caps = _caps(jobs_per_caller=1, jobs_total=32)
    async with (
        a.claim(heartbeat_interval=60, runner_timeout=120),
        b.claim(heartbeat_interval=60, runner_timeout=120),
    ):

        async def create(store: PostgresJobStore, caller: str, at: float, *paths: str) -> Job:
            new = NewJob(caller, "user", urls(*paths), ttl=TTL, **caps)
            return (await store.create_job(new, now=at))[0]

        jobs = [await create(a, f"c{i}", T0 + i, "x", f"y{i}") for i in range(5)]
        await create(b, "elsewhere", T0, "z")
        await a.record_outcome(OutcomeWrite(jobs[1].id, 0, result=Result("")), ttl=TTL, now=T0)
        await a.finish_job(jobs[2].id, JobState.CANCELLED, now=T0)
        lapsing = await create(a, "lapsing", T0 - TTL + 10, "w")
        found = await a.undrained_jobs([jobs[3].id], now=T0 + 20, limit=2)
        assert [(job.id, [t.url for t in targets]) for job, targets in found] == [
            (jobs[0].id, [t.url for t in urls("x", "y0")]),
            (jobs[4].id, [t.url for t in urls("x", "y4")]),
        ]
        assert found[0][0] == jobs[0]
        assert [job.id for job, _ in await a.undrained_jobs([], now=T0 + 5, limit=9)] == [
            lapsing.id,
            *(jobs[i].id for i in (0, 3, 4)),
        ]
        assert await a.undrained_jobs([], now=T0 + 20, limit=1) == found[:1]
