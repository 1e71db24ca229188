"""Group commit: outcomes ready at the same moment share one commit, each write on its own.

``record_outcomes`` runs several writes in one transaction, each on its own (SQLite: a
compare-and-set first, a savepoint when it misses; PostgreSQL: one statement, see
test_postgres_outcome_write.py):
a refused write (the target already has an outcome, or does not exist), a write for a lapsed
job, or a malformed one answers for itself and changes nothing, while the others are stored; a
database error (a full disk, say) fails the whole commit with that error, and stores nothing.
Through the runner, each drain whose outcome shared a commit gets its own answer back, on the
loop-thread fast path, on the store thread and on an in-memory store alike.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
from collections.abc import Iterator
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
    SQLiteJobStore,
    Store,
    StoreUnavailable,
    Target,
    TargetState,
    open_runner,
)
from trio_batch.store import DECLINED, NewJob, _group_commit
from trio_batch.store._group_commit import GroupCommit
from trio_batch.store.postgres import PostgresStore

from ..support.fakes import T0, FakeClock, PassCounter, ScriptedFetch, urls

TTL = 100.0
CAPS: dict[str, Any] = {"ttl": TTL, "targets_per_job": 8, "jobs_per_caller": 1, "jobs_total": 8}


@pytest.fixture(params=["memory", "file"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    path = ":memory:" if request.param == "memory" else tmp_path / "jobs.db"
    with Store.open(path) as store:
        yield store


@pytest.fixture(params=["memory", "file", "postgres"])
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


def test_writes_as_seen_share_a_commit_without_a_savepoint_each(any_store: Store) -> None:
    """A write whose job is as seen stores its outcome only if the job still is (one
    statement), before the bump: missing, it has written nothing, so it takes no savepoint;
    one that misses falls back (in a savepoint) and spoils none of the others."""
    store = any_store
    a, b, d = create(store, "a", 2), create(store, "b", 2), create(store, "d", 2)
    c = create(store, "c", 1, now=T0 - TTL - 1)  # its lease ran out at T0 - 1
    [a1] = store.record_outcomes(
        [OutcomeWrite(a.id, 0, result=Result("a0"), seen=a)], ttl=TTL, now=T0
    )
    assert isinstance(a1, Job)
    c_before = stored_row(store, c.id)
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    try:
        answers = store.record_outcomes(
            [
                OutcomeWrite(a.id, 1, error="boom", seen=a1),  # a's last: a turns partial
                OutcomeWrite(d.id, 0, result=Result("d0"), seen=d),
                OutcomeWrite(b.id, 9, result=Result("no such target"), seen=b),
                OutcomeWrite(c.id, 0, result=Result("too late"), seen=c),
                OutcomeWrite(b.id, 0, result=Result("b0"), seen=a),  # another job's
            ],
            ttl=TTL,
            now=T0 + 1,
        )
    finally:
        store.db.conn.set_trace_callback(None)
    last, d0, missing, too_late, b0 = answers
    assert isinstance(last, Job) and (last.status, last.targets_done) == (JobState.PARTIAL, 2)
    assert isinstance(d0, Job) and (d0.id, d0.status, d0.targets_done) == (d.id, "running", 1)
    assert isinstance(missing, OutcomeExists)
    assert too_late is None
    assert isinstance(b0, Job) and (b0.id, b0.targets_done) == (b.id, 1)
    assert stored_row(store, a.id)[:3] == ("partial", 2, 1)
    assert stored_row(store, d.id)[:3] == ("running", 1, 0)
    b_row = stored_row(store, b.id)
    assert b_row[:3] == ("running", 1, 0)  # counted once: the missing target's write undone
    assert b_row[-1] == (("done", Result("b0").to_json_text(), None, 1), ("pending", None, None, 0))
    assert stored_row(store, c.id) == c_before
    # The three that missed fell back, a savepoint each; the two as seen took none.
    assert [sql for sql in statements if sql.startswith("SAVEPOINT")] == ["SAVEPOINT nested"] * 3


def test_the_same_target_twice_in_one_shared_commit_is_counted_once(
    any_store: Store,
) -> None:
    store = any_store
    job = create(store, "a", 3)
    answers = store.record_outcomes(
        [
            OutcomeWrite(job.id, 0, result=Result("first"), seen=job),
            OutcomeWrite(job.id, 0, result=Result("again"), seen=job),  # same seen, same target
            OutcomeWrite(job.id, 1, error="boom", seen=job),  # stale seen: falls back
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
    [again] = store.record_outcomes(
        [OutcomeWrite(job.id, 0, error="late", seen=job)], ttl=TTL, now=T0 + 5
    )
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

    def failing_on_b(self: Store, job_id: str, *args: Any) -> Job | None:
        answer = real(self, job_id, *args)  # written, inside the shared transaction
        if job_id == b.id:
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


@pytest.mark.parametrize("kind", ["fast path", "store thread", "memory"])
async def test_drains_sharing_a_commit_each_get_their_own_answer(
    kind: str, tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    """Three drains' outcomes land in one commit: a's last, b's first, and c's, refused
    because another writer stored c's target 0 while it was being fetched."""
    if kind == "memory":
        store = other_writer = Store.open()
    else:
        # synchronous=FULL keeps every write off the loop thread (the store thread's path).
        sync = "NORMAL" if kind == "fast path" else "FULL"
        store = Store.open(tmp_path / "jobs.db", synchronous=sync)
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

    # a0, b0 and c0 shared the first commit; b1 had one of its own.
    assert commits.count("record_outcomes") == 2
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


async def _echo_commit(writes: list[int]) -> list[int | Exception]:
    return list(writes)


async def test_a_lone_writer_yields_to_gather_only_once() -> None:
    """A writer alone (a serial drain) does not pay a pass of the scheduler per write to
    gather a batch nobody else joins: only its first write yields."""
    group: GroupCommit[int, int] = GroupCommit(_echo_commit)
    counter = PassCounter()
    trio.lowlevel.add_instrument(counter)
    try:
        for i in range(50):
            assert await group.write(i, writer="a") == i
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert counter.passes == 1


def _batches_of_writers(names: str, writes: int) -> list[list[str]]:
    """Writers ``names`` (a letter each) write ``writes`` times each through one group, with
    nothing else yielding: the batches committed, each sorted (``"a0"``, ``"b0"``, ...)."""

    async def main() -> list[list[str]]:
        committed: list[list[str]] = []

        async def commit(batch: list[str]) -> list[str | Exception]:
            committed.append(sorted(batch))
            return list(batch)

        group: GroupCommit[str, str] = GroupCommit(commit)

        async def writer(name: str) -> None:
            for i in range(writes):
                assert await group.write(f"{name}{i}", writer=name) == f"{name}{i}"

        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(writer, name)
        return committed

    return trio.run(main)


def test_a_writer_alone_in_a_commit_still_waits_for_writers_yet_to_resume() -> None:
    """trio runs the tasks woken in one pass in either order in the next, so a leader often
    resumes ahead of the writers the last commit woke, and commits alone. Its next write must
    still yield to them, although it was alone: skipping that yield, it would commit alone
    again and again while they wait (here: all its writes, since nothing else yields)."""
    for _ in range(20):  # each run orders the passes at random
        committed = _batches_of_writers("ab", 10)
        assert sorted(w for writes in committed for w in writes) == sorted(
            f"{name}{i}" for name in "ab" for i in range(10)
        )
        for before, after in itertools.pairwise(committed):
            if len(before) == len(after) == 1 and before[0][0] == after[0][0]:
                # Two commits of one writer in a row: only once the other has finished.
                other = "b" if before[0][0] == "a" else "a"
                assert f"{other}9" in {
                    w for writes in committed[: committed.index(after)] for w in writes
                }, committed


def test_writers_woken_by_a_commit_join_the_next_even_when_the_leader_runs_first() -> None:
    """Regression: the leader of a commit writes again at once, yields to gather, and trio
    runs it ahead of the writers its commit woke in half of the passes: it committed alone,
    then they committed without it, which split 8 drains' commits into 1 and 7 (in the SQLite
    cycle with 8 callers, about 340 of 1,200 commits held one write). A leader that resumes
    before those writers yields once more, so every commit of writers in step holds them all."""
    for _ in range(5):  # each run orders its passes at random
        assert [len(batch) for batch in _batches_of_writers("abcdefgh", 16)] == [8] * 16


async def test_a_second_yield_that_gathers_nobody_is_skipped_for_a_while() -> None:
    """Where the writers a commit woke do not write again at once (their fetches yield), the
    leader's second yield gathers nobody and only delays its commit by a pass, a long one
    under load: after two such yields in a row, the next ``REGATHER_SKIPS`` leaders commit
    without it, then one tries again."""
    group: GroupCommit[int, int] = GroupCommit(_echo_commit)
    counter = PassCounter()
    trio.lowlevel.add_instrument(counter)
    group._waking = 1  # a writer the last commit woke, still to resume (it never writes)

    async def passes_of_a_write(i: int) -> int:
        before = counter.passes
        assert await group.write(i, writer="a") == i
        return counter.passes - before

    try:
        # To gather, then for the woken writer; one miss (as at a job's end) is not enough.
        assert [await passes_of_a_write(0), await passes_of_a_write(1)] == [2, 2]
        skips = _group_commit.REGATHER_SKIPS
        assert [await passes_of_a_write(i) for i in range(skips)] == [1] * skips
        assert await passes_of_a_write(99) == 2
    finally:
        group._waking = 0
        trio.lowlevel.remove_instrument(counter)


async def test_a_shared_commit_cannot_be_cut_by_ctrl_c() -> None:
    """Regression (review): a KeyboardInterrupt raised inside write, between the leader taking
    its batch and waking the followers, would leave them waiting for good; they cannot be
    cancelled, so shutdown would hang. write runs protected from it, its commit included."""
    seen: list[bool] = []

    async def commit(writes: list[int]) -> list[int | Exception]:
        seen.append(trio.lowlevel.currently_ki_protected())
        return await _echo_commit(writes)

    group: GroupCommit[int, int] = GroupCommit(commit)
    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(functools.partial(group.write, i, writer=i))
    assert seen and all(seen)
    assert not trio.lowlevel.currently_ki_protected()


class _HeldCommit:
    """A commit that waits for ``release`` the first time (a commit awaiting its thread or
    socket), optionally failing then; records each batch."""

    def __init__(self, *, first_fails: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.release = trio.Event()
        self.first_fails = first_fails

    async def __call__(self, writes: list[int]) -> list[int | Exception]:
        self.batches.append(list(writes))
        if len(self.batches) == 1:
            with trio.CancelScope(shield=True):  # a store call runs to completion
                await self.release.wait()
            if self.first_fails:
                raise OSError("disk full")
        return list(writes)


async def test_writes_arriving_while_a_commit_is_in_flight_share_the_next_commit() -> None:
    """While one commit awaits its thread, the writes that come one by one meanwhile (each in a
    pass of its own) wait for it and then share one commit, instead of each queuing a
    commit of its own behind it."""
    commit = _HeldCommit()
    group: GroupCommit[int, int] = GroupCommit(commit)
    answers: dict[int, int] = {}

    async def write(i: int) -> None:
        answers[i] = await group.write(i, writer=i)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, 0)
        await wait_all_tasks_blocked()
        try:
            for i in range(1, 4):
                nursery.start_soon(write, i)
                await wait_all_tasks_blocked()  # a pass of its own: it would have led a commit
            assert commit.batches == [[0]]
        finally:
            commit.release.set()  # a failed check must not leave the first commit waiting
    assert commit.batches == [[0], [1, 2, 3]]
    assert answers == {i: i for i in range(4)}


async def test_a_failed_commit_in_flight_lets_the_next_one_through() -> None:
    """The commit in flight fails: its writer gets the error, and the writes that waited for
    it are committed next, each with its own answer."""
    commit = _HeldCommit(first_fails=True)
    group: GroupCommit[int, int] = GroupCommit(commit)
    answers: dict[int, int | Exception] = {}

    async def write(i: int) -> None:
        try:
            answers[i] = await group.write(i, writer=i)
        except OSError as exc:
            answers[i] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, 0)
        await wait_all_tasks_blocked()
        nursery.start_soon(write, 1)
        nursery.start_soon(write, 2)
        await wait_all_tasks_blocked()
        commit.release.set()
    assert [sorted(batch) for batch in commit.batches] == [[0], [1, 2]]  # 1, 2: either order
    assert isinstance(answers[0], OSError)
    assert (answers[1], answers[2]) == (1, 2)


async def test_a_writer_waiting_for_the_commit_in_flight_cannot_be_cancelled() -> None:
    """Cancelled while it waits for the commit in flight, a writer still commits its write and
    returns its answer; the Cancelled comes at its next checkpoint."""
    commit = _HeldCommit()
    group: GroupCommit[int, int] = GroupCommit(commit)
    got: list[int] = []
    cancelled_after = False

    async def waiting_writer(scope: trio.CancelScope) -> None:
        nonlocal cancelled_after
        with scope:
            got.append(await group.write(1, writer=1))
            await trio.lowlevel.checkpoint()
        cancelled_after = scope.cancelled_caught

    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(group.write, 0, writer=0))
        await wait_all_tasks_blocked()
        scope = trio.CancelScope()
        nursery.start_soon(waiting_writer, scope)
        await wait_all_tasks_blocked()
        try:
            scope.cancel()
            await wait_all_tasks_blocked()
            assert got == []  # still waiting: the cancel did not cut it
        finally:
            commit.release.set()
    assert commit.batches == [[0], [1]]
    assert got == [1]
    assert cancelled_after


class _GatedCommit:
    """A commit that waits for ``gate`` while one is set (a commit awaiting its thread)."""

    def __init__(self) -> None:
        self.gate: trio.Event | None = None

    async def __call__(self, writes: list[int]) -> list[int | Exception]:
        if self.gate is not None:
            with trio.CancelScope(shield=True):  # a store call runs to completion
                await self.gate.wait()
        return list(writes)


async def test_a_writer_is_alone_only_when_nobody_else_writes_or_waits() -> None:
    """:meth:`GroupCommit.alone` tells a backend it may commit a write on the spot: only for
    the writer alone in the last commit, and only while no commit is in flight and no other
    write gathers (each checked where it alone decides)."""
    commit = _GatedCommit()
    group: GroupCommit[int, int] = GroupCommit(commit)
    assert not group.alone("a")  # no commit yet: its first write gathers
    await group.write(0, writer="a")
    assert group.alone("a") and not group.alone("b")
    seen: dict[str, bool] = {}

    async def a_writes_again() -> None:
        await group.write(1, writer="a")
        # Its commit is known; c, waiting for it with a batch of its own, has not run yet.
        seen["c gathered"] = group.alone("a")

    gate = commit.gate = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(a_writes_again)
        await wait_all_tasks_blocked()  # a's own commit in flight, a still its sole writer
        seen["in flight"] = group.alone("a")
        nursery.start_soon(functools.partial(group.write, 2, writer="c"))
        await wait_all_tasks_blocked()  # c waits for a's commit, gathering
        commit.gate = None
        gate.set()
    assert seen == {"in flight": False, "c gathered": False}
    assert group.alone("c") and not group.alone("a")


async def test_a_lone_writer_on_the_fast_path_commits_each_write_before_it_returns(
    tmp_path: Path,
) -> None:
    """A serial drain's writes after its first skip the group commit (it would not have
    gathered anyone) and are committed, seen by another connection, the moment each returns."""
    store = Store.open(tmp_path / "jobs.db")
    other = store.reopen()
    job_store = SQLiteJobStore(store)
    job_store._budget.seconds = 60.0  # every pass has room: what is tested is the path
    grouped: list[object] = []
    real_write = job_store._group.write

    async def counted(write: Any, *, writer: object) -> Any:
        grouped.append(writer)
        return await real_write(write, writer=writer)

    job_store._group.write = counted  # type: ignore[method-assign]
    try:
        job: Job | None = create(store, "alice", 5)
        for idx in range(5):
            assert job is not None
            write = OutcomeWrite(job.id, idx, result=Result(f"r{idx}"), seen=job)
            job = await job_store.record_outcome(write, ttl=TTL, now=T0)
            stored = "SELECT status FROM targets WHERE job_id = ? AND idx = ?"
            assert _read(other, stored, (write.job_id, idx)) == [("done",)]
        assert job is not None and job.status == JobState.DONE
        assert len(grouped) == 1  # the first write only
    finally:
        await job_store.aclose()
        other.close()
        store.close()


async def test_a_lone_writer_out_of_budget_waits_a_pass_then_skips_the_group_commit(
    tmp_path: Path,
) -> None:
    """A lone writer whose pass has used the loop's budget waits for a later pass and writes
    on the spot there; a writer that is not alone goes to the group commit at once instead
    (waiting for room first, it would miss the commit the others gather for)."""
    store = Store.open(tmp_path / "jobs.db")
    job_store = SQLiteJobStore(store)
    counter = PassCounter()
    grouped: list[int] = []  # the passes gone by when each write reached the group commit
    real_write = job_store._group.write

    async def counted(write: Any, *, writer: object) -> Any:
        grouped.append(counter.passes)
        return await real_write(write, writer=writer)

    job_store._group.write = counted  # type: ignore[method-assign]
    trio.lowlevel.add_instrument(counter)
    try:
        job: Job | None = create(store, "alice", 3)
        for idx in range(3):
            assert job is not None
            write = OutcomeWrite(job.id, idx, result=Result(""), seen=job)
            if idx == 2:
                job_store._group._sole_writer = None  # as after a shared commit: not alone
            job_store._budget.used = job_store._budget.seconds * 2  # no room in this pass
            assert job_store.record_outcome_now(write, ttl=TTL, now=T0) is DECLINED
            passes = counter.passes
            job = await job_store.record_outcome(write, ttl=TTL, now=T0)
            assert job is not None and job.targets_done == idx + 1
            if idx == 1:
                assert counter.passes > passes  # it waited for room, then wrote alone
                assert len(grouped) == 1  # the first write's only
        assert job is not None and job.status == JobState.DONE
        assert len(grouped) == 2 and grouped[1] == passes  # straight to the group commit
    finally:
        trio.lowlevel.remove_instrument(counter)
        await job_store.aclose()
        store.close()
