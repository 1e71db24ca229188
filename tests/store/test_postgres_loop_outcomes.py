"""PostgreSQL outcome writes sent from trio's loop (``_loop_outcomes``, ``_loop_conn``).

A runner's outcome writes go on a connection of their own, driven from the event loop, not the
store thread: each shared commit one pipeline and one transaction, answered write by write as
the store thread's ``record_outcomes`` answers. What must hold whatever happens to the
connection: a write cut off at ``store_timeout`` (a partition) or by a killed connection
leaves it in doubt and its retry is recognised; a cancelled caller waits for its write, which
is never left mid-transaction; a restart between writes is not seen by the caller. On a real
server, directly and through PgBouncer in transaction mode. No wall-clock assertion: every
wait below is a hang guard.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
import trio

from trio_batch import Job, JobState, OutcomeExists, OutcomeWrite, Result, StoreUnavailable, Target
from trio_batch.store import STORED, NewJob
from trio_batch.store.postgres import PostgresJobStore, PostgresStore
from trio_batch.store.postgres import _queries as q
from trio_batch.store.postgres._loop_conn import LoopConnection
from trio_batch.store.postgres._loop_outcomes import _seen_values
from trio_batch.store.postgres._tally import TerminalTally

from ..runner.test_postgres_cluster import _until
from ..support.cuttable_proxy import CuttableProxy
from ..support.fakes import T0
from ..support.pg_server import PgServer, through
from .test_group_commit import CAPS, TTL, create

HOOK = "https://hooks.test/done"

pytestmark = pytest.mark.skipif(
    not psycopg.Pipeline.is_supported(), reason="libpq before 14: the store thread writes"
)


@pytest.fixture(params=["direct", "through PgBouncer"])
def dsn(request: pytest.FixtureRequest, pg_dsn: str) -> str:
    return pg_dsn if request.param == "direct" else str(request.getfixturevalue("pooled_dsn"))


@contextlib.asynccontextmanager
async def opened(dsn: str, **options: Any) -> AsyncIterator[PostgresJobStore]:
    async with PostgresJobStore.open(dsn, **options) as store:
        yield store


@pytest.fixture
def no_thread_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the outcome commits made on the store thread instead (one entry each)."""
    calls: list[int] = []
    real = PostgresStore.record_outcomes

    def counting(self: PostgresStore, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(args[0]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PostgresStore, "record_outcomes", counting)
    return calls


def _admin(dsn: str, sql: str, params: Any = None) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def _stored(dsn: str, job_id: str) -> tuple[Any, ...]:
    [row] = _admin(
        dsn, "SELECT status, targets_done, targets_failed FROM jobs WHERE id = %s", (job_id,)
    )
    return tuple(row)


def _link(store: PostgresJobStore) -> LoopConnection:
    """The first outcome connection: the one a lone drain's writes go to."""
    return store._writers.loops[0].link


async def _commit(
    store: PostgresJobStore, writes: list[OutcomeWrite], *, ttl: float, now: float
) -> list[Job | Exception | None]:
    """``writes`` in one commit on the first outcome connection, from the loop."""
    return await store._writers.loops[0].record_outcomes(writes, ttl=ttl, now=now)


def _loop_backend(store: PostgresJobStore) -> int:
    """The server process of the store's outcome connection (open)."""
    conn = _link(store).opener.idle_connection()
    assert conn is not None
    return conn.info.backend_pid


def _idle(store: PostgresJobStore) -> bool:
    conn = _link(store).opener.idle_connection()
    return conn is not None and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


async def test_a_shared_commit_from_the_loop_answers_each_write(
    dsn: str, pg_dsn: str, no_thread_writes: list[int]
) -> None:
    async with opened(dsn) as store:
        a = create(store.store, "a", 2)
        b = create(store.store, "b", 1)
        first = await _commit(store, [OutcomeWrite(a.id, 0, result=Result("a0"))], ttl=TTL, now=T0)
        assert isinstance(first[0], Job) and first[0].targets_done == 1
        for _ in range(6):  # past psycopg's prepare threshold: the same answers once prepared
            answers = await _commit(
                store,
                [
                    OutcomeWrite(a.id, 0, result=Result("again")),  # stored already
                    OutcomeWrite(b.id, 0, error="boom"),
                    OutcomeWrite("unknown-job-id-0000000", 0, result=Result("x")),
                    OutcomeWrite(a.id, 1),  # neither a result nor an error
                ],
                ttl=TTL,
                now=T0 + 1,
            )
            assert isinstance(answers[0], OutcomeExists)
            assert answers[2] is None
            assert isinstance(answers[3], ValueError)
            b_answer = answers[1]
            if isinstance(b_answer, Job):
                assert (b_answer.status, b_answer.targets_failed) == (JobState.FAILED, 1)
            else:  # the first round stored it
                assert isinstance(b_answer, OutcomeExists)
        assert no_thread_writes == []
        assert _stored(pg_dsn, a.id)[:2] == ("running", 1)
        assert _idle(store)


async def test_refused_values_roll_the_commit_back_and_each_write_gets_its_own_answer(
    dsn: str, pg_dsn: str, no_thread_writes: list[int]
) -> None:
    """The server refuses one write's values: the transaction is rolled back at its Sync,
    nothing of it stored; the store thread then tells which write it was."""
    async with opened(dsn) as store:
        a = create(store.store, "a", 1)
        b = create(store.store, "b", 1)
        answers = await _commit(
            store,
            [
                OutcomeWrite(a.id, 0, result=Result("a0")),
                OutcomeWrite(b.id, 0, result=Result("b0"), attempts=2**31),
            ],
            ttl=TTL,
            now=T0 + 1,
        )
        assert no_thread_writes == [2]
        assert isinstance(answers[0], Job) and answers[0].targets_done == 1
        assert isinstance(answers[1], Exception) and "refused this outcome" in str(answers[1])
        assert _stored(pg_dsn, a.id) == ("done", 1, 0)  # once
        assert _stored(pg_dsn, b.id) == ("running", 0, 0)
        assert _idle(store)


async def test_a_write_cut_off_at_store_timeout_is_in_doubt_and_its_retry_is_recognised(
    pg_dsn: str,
    pg_proxy: CuttableProxy,
    no_thread_writes: list[int],
) -> None:
    """A partition once the write is sent (the proxy holds every byte): the loop's own
    deadline cuts it at store_timeout, drops the connection and keeps the write in doubt;
    once the network is back the retry answers the job, its outcome stored once."""
    async with opened(through(pg_proxy, pg_dsn), store_timeout=1.0) as store:
        job = create(store.store, "a", 2)
        write = OutcomeWrite(job.id, 0, result=Result("r"))
        await store.record_outcome(OutcomeWrite(job.id, 1, error="e"), ttl=TTL, now=T0)
        pg_proxy.hold()
        with pytest.raises(StoreUnavailable, match="did not answer within store_timeout"):
            await store.record_outcome(write, ttl=TTL, now=T0 + 1)
        assert not _link(store).is_open
        assert (job.id, 0) in store.store._maybe_committed
        pg_proxy.release()
        pg_proxy.cut()  # the held write may or may not reach the server: either way, once
        answer = await store.record_outcome(write, ttl=TTL, now=T0 + 2)
        assert answer is not None and answer.targets_done == 2
        assert (job.id, 0) not in store.store._maybe_committed
        assert no_thread_writes == [1]  # the retry in doubt, on the store thread
    assert _stored(pg_dsn, job.id) == ("partial", 2, 1)


@contextlib.contextmanager
def _job_locked(dsn: str, job_id: str) -> Iterator[psycopg.Connection[Any]]:
    """Another session holds the job's row lock until the block ends (or it commits)."""
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
        yield holder
        holder.rollback()


async def _until_waiting(dsn: str) -> None:
    """Until a trio_batch session waits on a lock (the write was sent and reached it)."""
    sql = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'trio_batch' "
        "AND wait_event_type = 'Lock' AND datname = current_database()"
    )
    await trio.to_thread.run_sync(
        _until, lambda: _admin(dsn, sql)[0][0], "the write to wait on the lock"
    )


async def test_a_cancelled_caller_waits_for_its_write_which_completes(
    dsn: str, pg_dsn: str
) -> None:
    """Cancelled while its write waits on a lock: the call returns only once the write is
    committed, then the cancel is raised; the connection is idle and used again."""
    async with opened(dsn) as store:
        job = create(store.store, "a", 2)
        await store.record_outcome(OutcomeWrite(job.id, 1, error="e"), ttl=TTL, now=T0)
        pid = _loop_backend(store) if dsn == pg_dsn else None
        finished: list[str] = []
        with _job_locked(pg_dsn, job.id) as holder:
            async with trio.open_nursery() as nursery:

                async def write(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
                    with trio.CancelScope() as scope:
                        task_status.started(scope)
                        await store.record_outcome(
                            OutcomeWrite(job.id, 0, result=Result("r")), ttl=TTL, now=T0 + 1
                        )
                        finished.append("returned")  # the cancel comes at the next checkpoint
                        await trio.lowlevel.checkpoint()
                        finished.append("not cancelled")
                    finished.append("cancelled" if scope.cancelled_caught else "?")

                scope = await nursery.start(write)
                await _until_waiting(pg_dsn)
                scope.cancel()
                await trio.sleep(0.05)
                assert finished == []  # still waiting for the write
                holder.rollback()  # the lock goes: the write goes through
        assert finished == ["returned", "cancelled"]
        assert _stored(pg_dsn, job.id) == ("partial", 2, 1)
        assert _idle(store)
        if pid is not None:
            assert _loop_backend(store) == pid  # not dropped: the same connection


async def test_a_write_killed_in_flight_is_in_doubt_and_its_retry_stores_it_once(
    pg_dsn: str, no_thread_writes: list[int]
) -> None:
    async with opened(pg_dsn) as store:
        job = create(store.store, "a", 1)
        await store.record_outcome(
            OutcomeWrite("unknown-job-id-0000000", 0, error="e"), ttl=TTL, now=T0
        )
        pid = _loop_backend(store)
        write = OutcomeWrite(job.id, 0, result=Result("r"))
        with _job_locked(pg_dsn, job.id):
            async with trio.open_nursery() as nursery:
                failed: list[BaseException] = []

                async def doomed() -> None:
                    with pytest.raises(StoreUnavailable) as caught:
                        await store.record_outcome(write, ttl=TTL, now=T0 + 1)
                    failed.append(caught.value)

                nursery.start_soon(doomed)
                await _until_waiting(pg_dsn)
                await trio.to_thread.run_sync(
                    _admin, pg_dsn, "SELECT pg_terminate_backend(%s, 10000)", (pid,)
                )
        assert len(failed) == 1
        assert (job.id, 0) in store.store._maybe_committed
        answer = await store.record_outcome(write, ttl=TTL, now=T0 + 2)
        assert answer is not None and (answer.status, answer.targets_done) == (JobState.DONE, 1)
        assert no_thread_writes == [1]
        again = await store.record_outcome(
            OutcomeWrite("unknown-job-id-0000000", 0, error="e"), ttl=TTL, now=T0 + 3
        )
        assert again is None and no_thread_writes == [1]
        assert _loop_backend(store) != pid  # a new connection for the next writes
    assert _stored(pg_dsn, job.id) == ("done", 1, 0)


async def test_a_restart_between_writes_is_not_seen_by_the_next_write(
    pg_dsn: str, pg_server: PgServer, no_thread_writes: list[int]
) -> None:
    async with opened(pg_dsn) as store:
        job = create(store.store, "a", 2)
        await store.record_outcome(OutcomeWrite(job.id, 0, error="e"), ttl=TTL, now=T0)
        pg_server.stop("fast")  # the outcome connection dies while idle
        pg_server.start()
        answer = await store.record_outcome(
            OutcomeWrite(job.id, 1, result=Result("r")), ttl=TTL, now=T0 + 1
        )
        assert answer is not None and answer.status == JobState.PARTIAL
        assert no_thread_writes == []


async def test_a_write_waiting_on_a_lock_gives_up_at_the_write_bound(dsn: str, pg_dsn: str) -> None:
    """The write's server-side bounds hold on the loop's connection too: on a direct one as
    session settings, through a pooler as SET LOCAL in the write's own transaction."""
    async with opened(dsn, store_timeout=1.0) as store:
        job = create(store.store, "a", 1)
        with _job_locked(pg_dsn, job.id), pytest.raises(StoreUnavailable, match="lock"):
            await store.record_outcome(
                OutcomeWrite(job.id, 0, result=Result("r")), ttl=TTL, now=T0 + 1
            )
        assert _idle(store)  # the server refused it: nothing in doubt, the connection kept
        assert (job.id, 0) not in store.store._maybe_committed
        answer = await store.record_outcome(
            OutcomeWrite(job.id, 0, result=Result("r")), ttl=TTL, now=T0 + 2
        )
        assert answer is not None and answer.status == JobState.DONE


def _job(status: JobState, total: int = 2) -> Job:
    return Job("job-id-000000000000000", status, None, total, total)


def test_a_job_finished_off_the_store_thread_is_counted_only_if_no_fresh_count_overlapped() -> None:
    """``counts`` reuses its count of the terminal jobs and adds those this store finishes;
    a commit from the loop can overlap a fresh count on the store thread, whose snapshot may
    or may not hold the job: then the tally is dropped (read again), never counted twice."""
    tally = TerminalTally()
    held, token = tally.start_read(T0, 30.0)
    assert held is None
    tally.keep(token, T0, {"done": [1, 2, 2, 0]})
    mark = tally.mark()  # a commit after the count: counted into it
    tally.count(_job(JobState.DONE), mark)
    assert tally.start_read(T0 + 1, 30.0)[0] == {"done": [2, 4, 4, 0]}

    mark = tally.mark()  # a commit that overlaps a fresh count's start
    held, token = tally.start_read(T0 + 40, 30.0)
    assert held is None
    tally.count(_job(JobState.DONE), mark)
    tally.keep(token, T0 + 40, {"done": [3, 6, 6, 0]})
    assert tally.start_read(T0 + 41, 30.0)[0] is None  # dropped: read again

    held, token = tally.start_read(T0 + 50, 30.0)  # a commit starting during a fresh count
    mark = tally.mark()
    tally.keep(token, T0 + 50, {"done": [3, 6, 6, 0]})
    tally.count(_job(JobState.FAILED), mark)
    assert tally.start_read(T0 + 51, 30.0)[0] is None

    held, token = tally.start_read(T0 + 60, 30.0)
    tally.keep(token, T0 + 60, {"done": [3, 6, 6, 0]})
    tally.count(_job(JobState.FAILED))  # on the store thread: always counted
    assert tally.start_read(T0 + 61, 30.0)[0] == {"done": [3, 6, 6, 0], "failed": [1, 2, 2, 0]}


async def test_with_two_outcome_connections_a_write_is_not_held_behind_another(
    dsn: str, pg_dsn: str
) -> None:
    """The outcome writes are spread over two connections, each its own group commit: while
    one drain's write waits on a lock, another drain's is committed on the other connection
    (with one connection it would wait for the first commit to end)."""
    async with opened(dsn, outcome_connections=2) as store:
        a = create(store.store, "a", 1)
        b = create(store.store, "b", 1)
        done: list[str] = []
        with _job_locked(pg_dsn, a.id) as holder:
            async with trio.open_nursery() as nursery:

                async def write_a() -> None:
                    await store.record_outcome(
                        OutcomeWrite(a.id, 0, result=Result("a")), ttl=TTL, now=T0
                    )
                    done.append("a")

                nursery.start_soon(write_a)
                await _until_waiting(pg_dsn)
                answer = await store.record_outcome(
                    OutcomeWrite(b.id, 0, result=Result("b")), ttl=TTL, now=T0
                )
                done.append("b")
                assert answer is not None and answer.status == JobState.DONE
                holder.rollback()
        assert done == ["b", "a"]
        assert [link.is_open for link in (o.link for o in store._writers.loops)] == [True, True]
    assert _stored(pg_dsn, a.id) == _stored(pg_dsn, b.id) == ("done", 1, 0)


async def test_the_outcome_connections_are_set_in_the_url_too(pg_dsn: str) -> None:
    joined = "&" if "?" in pg_dsn else "?"
    async with opened(f"{pg_dsn}{joined}outcome_connections=3") as store:
        assert len(store._writers.loops) == 3
    for bad in ("0", "two", "-1"):
        with pytest.raises(ValueError, match="outcome_connections"):
            PostgresJobStore.open(f"{pg_dsn}{joined}outcome_connections={bad}")
    with pytest.raises(ValueError, match="at least 1"):
        PostgresJobStore.open(pg_dsn, outcome_connections=0)


def _hooked(store: PostgresStore, caller: str, n: int) -> Job:
    """A running job of ``n`` targets with a webhook: its end writes an event."""
    targets = [Target(f"https://{caller}.test/{i}") for i in range(n)]
    new = NewJob(caller, "user", targets, status=JobState.RUNNING, webhook_url=HOOK, **CAPS)
    job, _ = store.create_job(new, now=T0)
    return job


async def test_a_write_seen_as_ongoing_that_ends_its_job_after_all_ends_it_once_with_its_event(
    dsn: str, pg_dsn: str, no_thread_writes: list[int]
) -> None:
    """A write whose writer saw its job with more than one target left goes as the lean
    statement, which cannot end a job: found at the job's last outcome (the writer's view was
    stale), it stores nothing and goes again as the full write, status and event included."""
    async with opened(dsn) as store:
        job = _hooked(store.store, "a", 2)
        first = await _commit(
            store, [OutcomeWrite(job.id, 0, result=Result("a"), seen=job)], ttl=TTL, now=T0 + 1
        )
        assert first[0] == store.store.get_job(job.id, now=T0 + 1)  # the job as stored
        assert isinstance(first[0], Job) and first[0].status == JobState.RUNNING
        stale = OutcomeWrite(job.id, 1, result=Result("b"), seen=job)  # 2 left, as it saw
        [last] = await _commit(store, [stale], ttl=TTL, now=T0 + 2)
        assert isinstance(last, Job) and (last.status, last.targets_done) == (JobState.DONE, 2)
        assert no_thread_writes == []
    assert _stored(pg_dsn, job.id) == ("done", 2, 0)
    assert _admin(pg_dsn, "SELECT event FROM outbox WHERE job_id = %s", (job.id,)) == [
        ("job.done",)
    ]


async def test_an_ongoing_write_answers_the_job_as_stored_whatever_its_writer_saw(
    dsn: str, no_thread_writes: list[int]
) -> None:
    """The ongoing write answers only the columns an outcome changes; the rest of the job
    comes from the writer's view of it, the changed ones from the row even when that view was
    stale (another outcome since, a failure counted, a cancel)."""
    async with opened(dsn) as store:
        job = _hooked(store.store, "a", 4)
        views = [job, job, job]  # each write as if the one before were not seen
        writes = [OutcomeWrite(job.id, 0, result=Result("a"), seen=views[0])]
        writes.append(OutcomeWrite(job.id, 1, error="boom", seen=views[1]))
        for n, write in enumerate(writes, 1):
            [answer] = await _commit(store, [write], ttl=TTL, now=T0 + n)
            assert answer == store.store.get_job(job.id, now=T0 + n)
        cancelled = await store.finish_job(job.id, JobState.CANCELLED, now=T0 + 3)
        assert cancelled is not None
        write = OutcomeWrite(job.id, 2, result=Result("c"), seen=views[2])
        [answer] = await _commit(store, [write], ttl=TTL, now=T0 + 4)
        assert answer == store.store.get_job(job.id, now=T0 + 4)
        assert isinstance(answer, Job) and (answer.status, answer.targets_done) == (
            JobState.CANCELLED,
            3,
        )
        assert no_thread_writes == []


def seen_params(job: Job) -> dict[str, Any]:
    """``RECORD_ONGOING_OUTCOME``'s parameters of ``job`` as seen, by name, as the driver binds
    them."""
    names = q.ONGOING_PARAMS[len(q.OUTCOME_PARAMS) :]
    return dict(zip(names, _seen_values(OutcomeWrite(job.id, 0, seen=job)), strict=True))


def test_the_ongoing_write_alone_never_ends_a_job(pg_dsn: str) -> None:
    store = PostgresStore.open(pg_dsn)
    try:
        job = _hooked(store, "a", 1)
        values = store._outcome_values(OutcomeWrite(job.id, 0, result=Result("x")), ttl=TTL, now=T0)
        values.update(seen_params(job))
        row = store.connection().execute(q.RECORD_ONGOING_OUTCOME, values).fetchone()
        assert row is not None and row[0] is None and row[1] is None  # stored nothing
        values["job_id"] = "unknown-job-id-0000000"
        row = store.connection().execute(q.RECORD_ONGOING_OUTCOME, values).fetchone()
        assert row is not None and row[0] is False  # not owned
    finally:
        store.close()
    assert _stored(pg_dsn, job.id) == ("running", 0, 0)
    assert _admin(pg_dsn, "SELECT status FROM targets WHERE job_id = %s", (job.id,)) == [
        ("pending",)
    ]


def _state(dsn: str, job_id: str) -> tuple[Any, ...]:
    targets = _admin(
        dsn,
        "SELECT status, result, error, attempts FROM targets WHERE job_id = %s ORDER BY idx",
        (job_id,),
    )
    [event] = _admin(
        dsn, "SELECT event, job_status, targets_done FROM outbox WHERE job_id = %s", (job_id,)
    )
    return _stored(dsn, job_id), tuple(map(tuple, targets)), tuple(event)


async def test_ongoing_writes_to_a_cancelled_job_with_failures_end_it_as_full_ones(
    pg_dsn: str,
    no_thread_writes: list[int],
) -> None:
    async with opened(pg_dsn) as store:
        states = []
        for lean in (True, False):
            # A job with failures, cancelled mid-way, a stale view at its last outcome: sent
            # as ongoing writes or as RECORD_OUTCOME, it ends the same.
            job = _hooked(store.store, "lean" if lean else "full", 4)

            async def write(w: OutcomeWrite, now: float, lean: bool = lean) -> Job:
                loop = store._writers.loops[0]
                if lean:
                    [answer] = await _commit(store, [w], ttl=TTL, now=now)
                else:
                    [answer] = await loop.record_outcomes([w], ttl=TTL, now=now, ongoing=False)
                assert isinstance(answer, Job), answer
                return answer

            a0 = await write(OutcomeWrite(job.id, 0, error="boom", seen=job), T0 + 1)
            assert (a0.status, a0.targets_done, a0.targets_failed) == (JobState.RUNNING, 1, 1)
            assert store.store.finish_job(job.id, JobState.CANCELLED, now=T0 + 2) is not None
            a1 = await write(OutcomeWrite(job.id, 1, result=Result("b"), seen=a0), T0 + 3)
            assert (a1.status, a1.targets_done) == (JobState.CANCELLED, 2)
            a2 = await write(OutcomeWrite(job.id, 2, error="x", seen=a1), T0 + 4)
            # Stale: seen with 2 left, sent lean; the job is at its last outcome.
            a3 = await write(OutcomeWrite(job.id, 3, result=Result("d"), seen=a1), T0 + 5)
            assert (a2.targets_done, a3.targets_done) == (3, 4)
            assert (a3.status, a3.targets_failed) == (JobState.CANCELLED, 2)
            states.append(_state(pg_dsn, job.id))
        assert no_thread_writes == []
    assert states[0] == states[1]
    assert states[0][0] == ("cancelled", 4, 2)
    assert states[0][2] == ("job.cancelled", "cancelled", 1)  # the cancel's event, untouched


async def test_an_ongoing_answer_is_the_job_as_stored_when_seen_is_a_forgotten_job(
    pg_dsn: str,
    no_thread_writes: list[int],
) -> None:
    # The ongoing statement answers four columns and takes the rest from the job seen: a job
    # forgotten and given again under its id must go as RECORD_OUTCOME, answered whole.
    async with opened(pg_dsn) as store:
        pg = store.store
        old_targets = [Target(f"https://old.test/{i}") for i in range(3)]
        old, _ = pg.create_job(
            NewJob(
                "old", "user", old_targets, status=JobState.RUNNING, metadata={"k": "old"}, **CAPS
            ),
            now=T0,
        )
        assert pg.finish_job(old.id, JobState.CANCELLED, now=T0 + 1) is not None
        assert pg.forget_job(old.id, now=T0 + 1) is not None
        new_targets = [Target(f"https://new.test/{i}") for i in range(5)]
        new, reused = pg.create_job(
            NewJob(
                "new",
                "admin",
                new_targets,
                status=JobState.RUNNING,
                job_id=old.id,
                metadata={"k": "new"},
                **CAPS,
            ),
            now=T0 + 2,
        )
        assert not reused and new.id == old.id
        [answer] = await _commit(
            store, [OutcomeWrite(old.id, 0, result=Result("x"), seen=old)], ttl=TTL, now=T0 + 3
        )
        stored = pg.get_job(old.id, now=T0 + 3)
        assert no_thread_writes == []
    assert isinstance(answer, Job) and stored is not None
    assert (stored.targets_total, stored.targets_done, stored.caller) == (5, 1, "new")
    fields = ("targets_total", "targets_done", "caller", "caller_class", "metadata", "created_at")
    assert [getattr(answer, f) for f in fields] == [getattr(stored, f) for f in fields]
    assert answer == stored


async def test_a_counting_writer_is_told_stored_by_an_ongoing_write(
    dsn: str, pg_dsn: str, no_thread_writes: list[int]
) -> None:
    """A write with ``stored_since`` whose row is its writer's view with the outcome counted in
    is told STORED on a direct connection (the ongoing write answers only the counts); through
    a pooler, where every write is RECORD_OUTCOME answered whole, it is told the job. A result
    stored as a failure, which its writer counts as a success, is told the job either way."""
    async with opened(dsn) as store:
        job = _hooked(store.store, "a", 4)
        first = OutcomeWrite(job.id, 0, result=Result("a"), seen=job, stored_since=(0, 0))
        [a0] = await _commit(store, [first], ttl=TTL, now=T0 + 1)
        second = OutcomeWrite(job.id, 1, error="boom", seen=job, stored_since=(1, 0))
        [a1] = await _commit(store, [second], ttl=TTL, now=T0 + 2)
        if _link(store).pooled:
            assert isinstance(a1, Job) and (a1.targets_done, a1.targets_failed) == (2, 1)
        else:
            assert (a0, a1) == (STORED, STORED)
        too_large = OutcomeWrite(
            job.id, 2, result=Result("x" * 100), seen=job, stored_since=(2, 1), max_result_size=10
        )
        [a2] = await _commit(store, [too_large], ttl=TTL, now=T0 + 3)
        assert a2 == store.store.get_job(job.id, now=T0 + 3)
        assert isinstance(a2, Job) and (a2.targets_done, a2.targets_failed) == (3, 2)
        assert no_thread_writes == []
    assert _stored(pg_dsn, job.id) == ("running", 3, 2)


async def test_an_ongoing_write_sent_again_whole_keeps_the_commits_one_deadline(
    pg_dsn: str,
    pg_proxy: CuttableProxy,
    mock_clock: trio.testing.MockClock,
    no_thread_writes: list[int],
) -> None:
    """One commit, one deadline: an ongoing write found at its job's last outcome goes again
    as RECORD_OUTCOME within what is left of the commit's store_timeout, not a fresh one. The
    first statement waits on a lock while the (mock) clock moves 3/4 of the way; the proxy
    holds the second for good. At the commit's deadline, in virtual time, the write is answered
    StoreUnavailable (in doubt); a fresh timeout would have kept it waiting 3/4 longer."""
    timeout = 20.0  # the server's lock_timeout (10 s, real time) is far beyond the lock's wait
    async with opened(through(pg_proxy, pg_dsn), store_timeout=timeout) as store:
        job = _hooked(store.store, "a", 2)
        first = OutcomeWrite(job.id, 0, result=Result("a"), seen=job)
        await _commit(store, [first], ttl=TTL, now=T0 + 1)  # the connection open, prepared
        stale = OutcomeWrite(job.id, 1, result=Result("b"), seen=job)  # 2 left, as it saw
        failed_after: list[float] = []
        start = trio.current_time()
        with _job_locked(pg_dsn, job.id) as holder:
            async with trio.open_nursery() as nursery:

                async def write() -> None:
                    [answer] = await _commit(store, [stale], ttl=TTL, now=T0 + 2)
                    assert isinstance(answer, StoreUnavailable), answer
                    assert "within store_timeout" in str(answer)
                    failed_after.append(trio.current_time() - start)

                nursery.start_soon(write)
                await _until_waiting(pg_dsn)
                mock_clock.jump(0.75 * timeout)
                pg_proxy.hold_on(b"trio_batch_record_outcome\x00")  # the resend's Parse
                holder.rollback()  # the ongoing write goes through: it stores nothing
                assert await trio.to_thread.run_sync(pg_proxy.held.wait, 30.0)
                mock_clock.jump(0.25 * timeout)  # the commit's deadline
                await trio.testing.wait_all_tasks_blocked()
                at_the_deadline = list(failed_after)
                mock_clock.jump(timeout)  # past any fresh deadline: the test ends either way
        assert at_the_deadline == [timeout]
        assert (job.id, 1) in store.store._maybe_committed
        pg_proxy.release()
        pg_proxy.cut()
        [answer] = await _commit(store, [stale], ttl=TTL, now=T0 + 3)  # its retry, recognised
        assert isinstance(answer, Job) and (answer.status, answer.targets_done) == (
            JobState.DONE,
            2,
        )
        assert no_thread_writes == [1]
    assert _stored(pg_dsn, job.id) == ("done", 2, 0)


async def test_refused_values_left_to_the_store_thread_keep_the_commits_one_deadline(
    dsn: str, pg_dsn: str, mock_clock: trio.testing.MockClock, no_thread_writes: list[int]
) -> None:
    """The commit whose values the database refused goes to the store thread by what is left
    of its deadline: here the first statement waited on a lock until just before it (mock
    time), so the thread's call is not made at all (StoreUnavailable, nothing written), where
    a fresh store_timeout would have let it run a whole timeout more."""
    timeout = 20.0
    async with opened(dsn, store_timeout=timeout) as store:
        a = create(store.store, "a", 1)
        b = create(store.store, "b", 1)
        writes = [
            OutcomeWrite(a.id, 0, result=Result("a0")),
            OutcomeWrite(b.id, 0, result=Result("b0"), attempts=2**31),  # refused
        ]
        failed: list[BaseException] = []
        with _job_locked(pg_dsn, a.id) as holder:
            async with trio.open_nursery() as nursery:

                async def write() -> None:
                    with pytest.raises(StoreUnavailable, match="was not made") as caught:
                        await _commit(store, writes, ttl=TTL, now=T0 + 1)
                    failed.append(caught.value)

                nursery.start_soon(write)
                await _until_waiting(pg_dsn)
                mock_clock.jump(timeout - 1e-6)  # the commit's deadline a microsecond away
                holder.rollback()
        assert len(failed) == 1
        assert no_thread_writes == []
        assert _idle(store)
        assert _stored(pg_dsn, a.id) == _stored(pg_dsn, b.id) == ("running", 0, 0)


async def test_a_write_queued_behind_a_commit_in_flight_keeps_its_own_deadline(
    pg_dsn: str,
    pg_proxy: CuttableProxy,
    mock_clock: trio.testing.MockClock,
    no_thread_writes: list[int],
) -> None:
    """A write that comes while another commit is in flight waits for it, gathering, then
    commits: by store_timeout from when it was made, not from when its own commit started.
    Here (mock time) the first commit is held from 0 and cut at T; the second write came at
    3/4 T, its commit is held too, and it fails at 7/4 T: a fresh timeout would hold it to
    2 T, and with each commit queued behind the last, a partition would stall a drain for as
    many timeouts as commits were ahead of it."""
    timeout = 20.0
    async with opened(through(pg_proxy, pg_dsn), store_timeout=timeout) as store:
        a = create(store.store, "a", 1)
        b = create(store.store, "b", 1)
        c = create(store.store, "c", 1)
        await store.record_outcome(OutcomeWrite(c.id, 0, error="e"), ttl=TTL, now=T0)  # open
        start = trio.current_time()
        failed: dict[str, float] = {}

        async def write(job: Job) -> None:
            with pytest.raises(StoreUnavailable, match="within store_timeout"):
                await store.record_outcome(
                    OutcomeWrite(job.id, 0, result=Result("r")), ttl=TTL, now=T0 + 1
                )
            failed[job.caller] = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            pg_proxy.hold_on(a.id.encode())  # the first commit's statement
            nursery.start_soon(write, a)
            assert await trio.to_thread.run_sync(pg_proxy.held.wait, 30.0)
            mock_clock.jump(0.75 * timeout)
            nursery.start_soon(write, b)  # waits for the commit in flight
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(0.25 * timeout)  # the first commit's deadline: cut, reconnect
            await trio.testing.wait_all_tasks_blocked()
            assert failed == {"a": timeout}
            pg_proxy.hold_on(b.id.encode())  # the second commit's statement, once connected
            pg_proxy.release()
            assert await trio.to_thread.run_sync(pg_proxy.held.wait, 30.0)
            mock_clock.jump(0.75 * timeout)  # the second write's own deadline
            await trio.testing.wait_all_tasks_blocked()
            at_its_deadline = dict(failed)
            mock_clock.jump(timeout)  # past any fresh deadline: the test ends either way
        assert at_its_deadline == {"a": timeout, "b": 1.75 * timeout}
        assert no_thread_writes == []
        pg_proxy.release()
