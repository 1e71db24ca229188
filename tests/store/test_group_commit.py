"""Group commit: outcomes that queue behind the commit in flight share the next commit, each
write on its own.

``record_outcomes`` runs several writes in one transaction, each on its own (a write stores
its outcome first and is refused having written nothing; see test_postgres_outcome_write.py):
a refused write (the target already has an outcome, or does not exist), a write for a lapsed
job, or a malformed one answers for itself and changes nothing, while the others are stored; a
database error (a full disk, say) fails the whole commit with that error, and stores nothing.
Through the runner, each drain whose outcome shared a commit gets its own answer back, on a
file and on an in-memory store alike.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from trio_batch import (
    Config,
    Job,
    JobState,
    OutcomeExists,
    OutcomeWrite,
    Result,
    Store,
    StoreUnavailable,
    Target,
    TargetState,
    open_runner,
)
from trio_batch.store import NewJob
from trio_batch.store._thread import StoreThread
from trio_batch.store.postgres import PostgresStore

from ..support.fakes import T0, FakeClock, ScriptedFetch, urls
from ..support.markers import POSTGRES

TTL = 100.0
CAPS: dict[str, Any] = {"ttl": TTL, "targets_per_job": 8, "jobs_per_caller": 1, "jobs_total": 8}


@pytest.fixture(params=["memory", "file"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    path = ":memory:" if request.param == "memory" else tmp_path / "jobs.db"
    with Store.open(path) as store:
        yield store


@pytest.fixture(params=["memory", "file", pytest.param("postgres", marks=POSTGRES)])
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store | PostgresStore]:
    """Each backend's synchronous store, whose ``record_outcomes`` is the shared commit."""
    if request.param == "postgres":
        store = PostgresStore.open(request.getfixturevalue("pg_dsn"))
        try:
            yield store
        finally:
            store.close()
    else:
        with Store.open(":memory:" if request.param == "memory" else tmp_path / "jobs.db") as db:
            yield db


def _read(store: Store | PostgresStore, sql: str, params: tuple[Any, ...]) -> list[Any]:
    """Rows of ``sql`` (``?`` placeholders) on either backend's own connection."""
    if isinstance(store, PostgresStore):
        return store.connection().execute(sql.replace("?", "%s"), params).fetchall()
    return store.db.execute(sql, params).fetchall()


def _in_transaction(store: Store | PostgresStore) -> bool:
    if isinstance(store, PostgresStore):
        status = store.connection().info.transaction_status
        return bool(status != psycopg.pq.TransactionStatus.IDLE)
    return store.db.conn.in_transaction


def create(store: Store | PostgresStore, caller: str, n: int, *, now: float = T0) -> Job:
    job, reused = store.create_job(
        NewJob(
            caller,
            "user",
            [Target(f"https://{caller}.test/{i}") for i in range(n)],
            status=JobState.RUNNING,
            **CAPS,
        ),
        now=now,
    )
    assert not reused
    return job


def stored_row(store: Store | PostgresStore, job_id: str) -> tuple[Any, ...]:
    """The job's row and its targets as stored, read past any lease."""
    [job] = _read(
        store,
        "SELECT status, targets_done, targets_failed, results_size, updated_at, expires_at "
        "FROM jobs WHERE id = ?",
        (job_id,),
    )
    targets = _read(
        store,
        "SELECT status, result, error, attempts FROM targets WHERE job_id = ? ORDER BY idx",
        (job_id,),
    )
    return (*job, tuple(tuple(t) for t in targets))


def test_each_write_in_a_shared_commit_stands_or_falls_on_its_own(
    sql_store: Store | PostgresStore,
) -> None:
    store = sql_store
    a = create(store, "a", 2)
    b = create(store, "b", 2)
    store.record_outcomes([OutcomeWrite(b.id, 0, result=Result("first"))], ttl=TTL, now=T0)
    b_before = stored_row(store, b.id)
    lapsed = create(store, "c", 1, now=T0 - TTL - 1)  # its lease ran out at T0 - 1
    lapsed_before = stored_row(store, lapsed.id)

    answers = store.record_outcomes(
        [
            OutcomeWrite(a.id, 0, result=Result("a0"), attempts=2),
            # Refused: b's target 0 has its outcome. Were it not rolled back, this write would
            # bump b to 2 of 2 outcomes and make it terminal.
            OutcomeWrite(b.id, 0, error="again"),
            OutcomeWrite(lapsed.id, 0, result=Result("too late")),
            OutcomeWrite(a.id, 9, result=Result("no such target")),
            OutcomeWrite(a.id, 1, error="boom", hint="h"),  # a's last outcome: a turns partial
            OutcomeWrite(b.id, 1),  # neither a result nor an error
        ],
        ttl=TTL,
        now=T0 + 1,
    )

    first, refused, too_late, missing, last, malformed = answers
    assert isinstance(first, Job) and (first.id, first.targets_done) == (a.id, 1)
    assert first.status == JobState.RUNNING
    assert isinstance(refused, OutcomeExists)
    assert too_late is None
    assert isinstance(missing, OutcomeExists)
    assert isinstance(last, Job) and last.id == a.id
    assert (last.status, last.targets_done, last.targets_failed) == (JobState.PARTIAL, 2, 1)
    assert isinstance(malformed, ValueError)
    # What was stored: exactly the two good writes.
    a0 = Result("a0").to_json_text()
    assert stored_row(store, a.id) == (
        "partial",
        2,
        1,
        len(a0),
        T0 + 1,
        T0 + 1 + TTL,
        (("done", a0, None, 2), ("failed", None, "boom", 1)),
    )
    assert stored_row(store, b.id) == b_before  # not even its lease moved
    assert stored_row(store, lapsed.id) == lapsed_before
    assert not _in_transaction(store)
    # The refused and malformed writes left b writable: its next outcome lands as usual.
    [after] = store.record_outcomes(
        [OutcomeWrite(b.id, 1, result=Result("second"))], ttl=TTL, now=T0 + 2
    )
    assert isinstance(after, Job) and (after.status, after.targets_done) == (JobState.DONE, 2)


def test_the_same_target_twice_in_one_shared_commit_is_counted_once(
    any_store: Store,
) -> None:
    store = any_store
    job = create(store, "a", 3)
    answers = store.record_outcomes(
        [
            OutcomeWrite(job.id, 0, result=Result("first")),
            OutcomeWrite(job.id, 0, result=Result("again")),  # the same target again
            OutcomeWrite(job.id, 1, error="boom"),
        ],
        ttl=TTL,
        now=T0 + 1,
    )
    first, again, second = answers
    assert isinstance(first, Job) and first.targets_done == 1
    assert isinstance(again, OutcomeExists)
    assert isinstance(second, Job) and (second.targets_done, second.targets_failed) == (2, 1)
    row = stored_row(store, job.id)
    assert row[:3] == ("running", 2, 1)
    assert row[3] == len(Result("first").to_json_text())  # results_size counted once
    assert [t[0] for t in row[-1]] == ["done", "failed", "pending"]


def test_a_last_outcome_refused_in_a_shared_commit_leaves_no_status_nor_event(
    any_store: Store,
) -> None:
    """The fallback settles before it stores: a refusal there must undo the settle too."""
    store = any_store
    job, _ = store.create_job(
        NewJob(
            "a",
            "user",
            [Target("https://a.test/0")],
            status=JobState.RUNNING,
            webhook_url="https://hooks.test/x",
            **CAPS,
        ),
        now=T0,
    )
    [ok] = store.record_outcomes([OutcomeWrite(job.id, 0, result=Result("r"))], ttl=TTL, now=T0)
    assert isinstance(ok, Job) and ok.status == JobState.DONE
    event = store.db.execute("SELECT event, event_at FROM outbox WHERE job_id = ?", (job.id,))
    before = event.fetchall()
    [again] = store.record_outcomes([OutcomeWrite(job.id, 0, error="late")], ttl=TTL, now=T0 + 5)
    assert isinstance(again, OutcomeExists)
    assert stored_row(store, job.id)[:3] == ("done", 1, 0)
    after = store.db.execute("SELECT event, event_at FROM outbox WHERE job_id = ?", (job.id,))
    assert after.fetchall() == before


def test_a_database_error_in_a_shared_commit_stores_none_of_it(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    a = create(store, "a", 1)
    b = create(store, "b", 1)
    before = stored_row(store, a.id), stored_row(store, b.id)
    real = Store._write_outcome

    def failing_on_b(self: Store, write: OutcomeWrite, *args: Any) -> Job | None:
        answer = real(self, write, *args)  # written, inside the shared transaction
        if write.job_id == b.id:
            raise sqlite3.OperationalError("disk I/O error")
        return answer

    monkeypatch.setattr(Store, "_write_outcome", failing_on_b)
    with pytest.raises(StoreUnavailable, match="disk I/O error"):
        store.record_outcomes(
            [OutcomeWrite(a.id, 0, result=Result("a0")), OutcomeWrite(b.id, 0, error="e")],
            ttl=TTL,
            now=T0,
        )
    assert (stored_row(store, a.id), stored_row(store, b.id)) == before
    assert not store.db.conn.in_transaction


@pytest.mark.parametrize("kind", ["file", "memory"])
async def test_drains_sharing_a_commit_each_get_their_own_answer(
    kind: str, tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    """Three drains' outcomes land in one commit: a's last, b's first, and c's, refused
    because another writer stored c's target 0 while it was being fetched."""
    if kind == "memory":
        store = other_writer = Store.open()
    else:
        store = Store.open(tmp_path / "jobs.db")
        other_writer = store.reopen()
    a, b, c = urls("a0"), urls("b0", "b1"), urls("c0", "c1")
    release = trio.Event()
    for target in (a[0], b[0], c[0]):
        fetch.watch(target.url)
        fetch.gates[target.url] = release  # one event: the three fetches return together
    commits: list[str] = []
    config = Config(ttl=TTL, jobs_per_caller=1, jobs_total=8)
    async with open_runner(
        store, fetch, config, now=clock, on_store_write=lambda op, _: commits.append(op)
    ) as runner:
        ids = [
            (await runner.submit(name, "user", ts))[0]
            for name, ts in zip("abc", (a, b, c), strict=True)
        ]
        for target in (a[0], b[0], c[0]):
            await fetch.started[target.url].wait()
        elsewhere = other_writer.record_outcome(
            ids[2], 0, result=Result("from elsewhere"), ttl=TTL, now=clock()
        )
        assert elsewhere is not None
        release.set()
        jobs = [await runner.wait(job_id) for job_id in ids]
        statuses = [await runner.status(job_id) for job_id in ids]
    if other_writer is not store:
        other_writer.close()
    store.close()

    # Four outcomes: however trio ordered the drains, each commit is observed once.
    assert 1 <= commits.count("record_outcomes") <= 4
    job_a, job_b, job_c = jobs
    assert job_a is not None and (job_a.status, job_a.targets_done) == (JobState.DONE, 1)
    assert job_b is not None and (job_b.status, job_b.targets_done) == (JobState.DONE, 2)
    # c's drain was told its write was refused: it stopped and failed the job, saying why.
    assert job_c is not None and job_c.status == JobState.FAILED
    assert job_c.error is not None and "OutcomeExists" in job_c.error
    assert (job_c.targets_done, job_c.targets_failed) == (1, 0)
    status_b, status_c = statuses[1], statuses[2]
    assert status_b is not None and status_c is not None
    fetched_b = [Result(f"content of {t.url}", {"url": t.url}) for t in b]
    assert [t.result for t in status_b[1]] == fetched_b
    assert [t.status for t in status_c[1]] == [TargetState.DONE, TargetState.PENDING]
    assert status_c[1][0].result == Result("from elsewhere")
    assert c[1].url not in fetch.calls


def test_a_full_disk_in_a_shared_commit_raises_the_full_disk_error(any_store: Store) -> None:
    """Regression: SQLite rolls the whole transaction back on a full disk, savepoint and all;
    rolling back to the savepoint then failed with "no such savepoint", hiding the cause."""
    store = any_store
    a = create(store, "a", 1)
    b = create(store, "b", 1)
    before = stored_row(store, a.id), stored_row(store, b.id)
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(StoreUnavailable, match="database or disk is full") as refused:
        store.record_outcomes(
            [
                OutcomeWrite(a.id, 0, result=Result("small")),
                OutcomeWrite(b.id, 0, result=Result("x" * 100_000)),
            ],
            ttl=TTL,
            now=T0,
        )
    assert isinstance(refused.value.__cause__, sqlite3.OperationalError)
    assert (stored_row(store, a.id), stored_row(store, b.id)) == before
    assert not store.db.conn.in_transaction
    store.db.execute("PRAGMA max_page_count = 1000000")
    answers = store.record_outcomes(
        [OutcomeWrite(a.id, 0, result=Result("small")), OutcomeWrite(b.id, 0, error="e")],
        ttl=TTL,
        now=T0,
    )
    assert [answer.status for answer in answers] == [JobState.DONE, JobState.FAILED]  # type: ignore[union-attr]


def test_a_read_rolled_back_by_sqlite_raises_its_own_error_not_a_commit_error() -> None:
    """The sibling of the savepoint case: a read snapshot whose transaction SQLite already
    rolled back (as it does on an I/O error) must let the real error through."""
    store = Store.open(":memory:")
    try:
        with pytest.raises(RuntimeError, match="the real cause"), store._snapshot():
            store.db.conn.execute("ROLLBACK")  # what SQLite does by itself on an I/O error
            raise RuntimeError("the real cause")
        assert not store.db.conn.in_transaction
    finally:
        store.close()


class _Batches:
    """A grouped function for the store thread that records each batch it is called with;
    an item ``"boom"`` is refused alone, ``"fail"`` fails the whole batch."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def __call__(self, items: list[str]) -> list[str | Exception]:
        self.batches.append(list(items))
        if "fail" in items:
            raise OSError("disk full")
        return [ValueError(item) if item == "boom" else item.upper() for item in items]


@contextlib.asynccontextmanager
async def _held_thread() -> AsyncIterator[tuple[StoreThread, threading.Event]]:
    """A started store thread busy with a call until the event is set (as a commit or a
    read in flight holds it), then stopped."""
    thread, release, holding = StoreThread(), threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        release.wait(30)  # bounded, should the test fail first

    thread.start()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(thread.run, hold)
            # Taken from the queue before the test queues anything: else the thread could
            # take the hold and the first call together, and make the call a group of its own.
            assert await trio.to_thread.run_sync(holding.wait, 30)
            try:
                yield thread, release
            finally:
                release.set()
    finally:
        thread.stop()


async def test_writes_queued_behind_a_busy_thread_share_one_commit() -> None:
    batches = _Batches()
    answers: dict[str, object] = {}

    async def write(item: str) -> None:
        try:
            answers[item] = (await thread.run_grouped(batches, item))[0]
        except Exception as exc:
            answers[item] = exc

    async with _held_thread() as (thread, release), trio.open_nursery() as nursery:
        for item in ("a", "boom", "c"):
            nursery.start_soon(write, item)
            await wait_all_tasks_blocked()  # each queued in a pass of its own
        release.set()
    assert batches.batches == [["a", "boom", "c"]]  # one commit for the three
    assert answers["a"] == "A" and answers["c"] == "C"  # each its own answer
    assert isinstance(answers["boom"], ValueError)  # refused alone


async def test_a_commits_writers_are_woken_before_the_call_queued_behind_it_ends() -> None:
    batches = _Batches()
    slow_read = threading.Event()  # what the call behind the commit waits for
    answers: list[object] = []

    async def write() -> None:
        answers.append((await thread.run_grouped(batches, "a"))[0])
        slow_read.set()  # answered while the read still held the thread: it ends now

    async def read() -> None:
        # True if the writer released it; False had it waited out its bound (5 s) first.
        answers.append(await thread.run(slow_read.wait, 5))

    async with _held_thread() as (thread, release), trio.open_nursery() as nursery:
        nursery.start_soon(write)
        await wait_all_tasks_blocked()  # the write queued first, the read behind it
        nursery.start_soon(read)
        await wait_all_tasks_blocked()
        release.set()
    assert answers == ["A", True]


async def test_a_write_to_an_idle_thread_is_committed_at_once_alone() -> None:
    batches = _Batches()
    thread = StoreThread()
    thread.start()
    try:
        assert await thread.run_grouped(batches, "a") == ("A", pytest.approx(0, abs=60))
        assert await thread.run_grouped(batches, "b") == ("B", pytest.approx(0, abs=60))
    finally:
        thread.stop()
    assert batches.batches == [["a"], ["b"]]


async def test_a_failed_commit_fails_each_of_its_writes_and_the_next_goes_through() -> None:
    batches = _Batches()
    answers: dict[str, object] = {}

    async def write(item: str) -> None:
        try:
            answers[item] = (await thread.run_grouped(batches, item))[0]
        except Exception as exc:
            answers[item] = exc

    async with _held_thread() as (thread, release):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write, "a")
            nursery.start_soon(write, "fail")
            await wait_all_tasks_blocked()
            release.set()
        assert await thread.run_grouped(batches, "d") == ("D", pytest.approx(0, abs=60))
    assert isinstance(answers["a"], OSError) and isinstance(answers["fail"], OSError)
    assert sorted(map(sorted, batches.batches)) == [["a", "fail"], ["d"]]


async def test_only_the_first_answer_of_a_commit_carries_its_time() -> None:
    batches = _Batches()
    timed: list[float | None] = []

    async def write(item: str) -> None:
        timed.append((await thread.run_grouped(batches, item))[1])

    async with _held_thread() as (thread, release), trio.open_nursery() as nursery:
        for item in "abc":
            nursery.start_soon(write, item)
        await wait_all_tasks_blocked()
        release.set()
    assert len(timed) == 3 and timed.count(None) == 2  # one observation per commit


async def test_a_writer_waiting_for_its_commit_cannot_be_cancelled() -> None:
    """Cancelled while its write is queued, a writer still gets its answer; the Cancelled
    comes at its next checkpoint."""
    batches = _Batches()
    got: list[str] = []
    scope = trio.CancelScope()  # the writer's alone: the test's own task goes on

    async def waiting_writer() -> None:
        with scope:
            got.append((await thread.run_grouped(batches, "a"))[0])
            await trio.lowlevel.checkpoint()
            got.append("went on past the checkpoint")

    async with _held_thread() as (thread, release), trio.open_nursery() as nursery:
        nursery.start_soon(waiting_writer)
        await wait_all_tasks_blocked()
        scope.cancel()
        await wait_all_tasks_blocked()
        assert got == []  # still waiting: the cancel did not cut it
        release.set()
    assert scope.cancelled_caught
    assert got == ["A"]


def test_a_successs_hint_is_stored_as_safe_text_and_fails_no_other_write(
    sql_store: Store | PostgresStore,
) -> None:
    """A hint goes with a success too (the store keeps it): it is stored as every error and
    hint is (bounded, no lone surrogate, no NUL), so one that the database cannot take
    as it is neither fails that write nor the others sharing its commit."""
    store = sql_store
    a = create(store, "a", 1)
    b = create(store, "b", 1)
    answers = store.record_outcomes(
        [
            OutcomeWrite(a.id, 0, result=Result("a0")),
            OutcomeWrite(b.id, 0, result=Result("b0"), hint="lone \ud800 and nul \x00"),
        ],
        ttl=TTL,
        now=T0 + 1,
    )
    assert [type(x) for x in answers] == [Job, Job], answers
    [(hint,)] = _read(store, "SELECT hint FROM targets WHERE job_id = ?", (b.id,))
    assert hint == "lone \\ud800 and nul \\x00"
    assert stored_row(store, a.id)[:3] == ("done", 1, 0)


def test_a_write_naming_no_job_or_target_there_can_be_answers_as_for_an_unknown_one(
    sql_store: Store | PostgresStore,
) -> None:
    """A job id of no job id's shape (text the database cannot even take) reads as an
    unknown job, and an index past any target's as a target that does not exist: on every
    backend alike, and without failing the other writes of the commit."""
    store = sql_store
    a = create(store, "a", 2)
    answers = store.record_outcomes(
        [
            OutcomeWrite(a.id, 0, result=Result("a0")),
            OutcomeWrite("\ud800" * 22, 0, result=Result("x")),
            OutcomeWrite("nul\x00" + "x" * 18, 0, result=Result("x")),
            OutcomeWrite(a.id, 2**31, result=Result("x")),
            OutcomeWrite(a.id, -1, result=Result("x")),
            OutcomeWrite(a.id, 1, error="boom"),
        ],
        ttl=TTL,
        now=T0 + 1,
    )
    assert isinstance(answers[0], Job) and answers[0].targets_done == 1
    assert answers[1:3] == [None, None]
    assert [type(x) for x in answers[3:5]] == [OutcomeExists, OutcomeExists]
    assert isinstance(answers[5], Job) and answers[5].status == JobState.PARTIAL
    assert stored_row(store, a.id)[:3] == ("partial", 2, 1)
