"""Every store backend behaves the same: each JobStore operation, checked through the interface.

The ``job_store`` fixture is parametrised over the backends of ``tests/support/backends.py``;
a backend added there runs every check here too. Only the :class:`~trio_batch.JobStore`
methods are used, never a backend's own API.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_batch import (
    Busy,
    CallerBusy,
    InvalidRequest,
    InvalidTargets,
    JobFilter,
    JobState,
    JobStore,
    Options,
    OutcomeExists,
    OutcomeWrite,
    Result,
    Target,
    TargetState,
    TargetStatus,
    TooManyTargets,
    open_store,
)
from trio_batch.store import NewJob, ReapedJob

T0 = 1_000_000.0
TTL = 100.0
CAPS: dict[str, Any] = {"ttl": TTL, "targets_per_job": 4, "jobs_per_caller": 2, "jobs_total": 3}


def _targets(n: int, prefix: str = "https://example.com/") -> list[Target]:
    return [Target(f"{prefix}{i}") for i in range(n)]


async def _create(
    store: JobStore, caller: str = "alice", n: int = 2, prefix: str = "u:", **kwargs: Any
) -> Any:
    now = kwargs.pop("now", T0)
    args = {**CAPS, "status": JobState.RUNNING, **kwargs}
    return await store.create_job(NewJob(caller, "default", _targets(n, prefix), **args), now=now)


def _ok(job_id: str, idx: int, text: str = "x") -> OutcomeWrite:
    return OutcomeWrite(job_id, idx, result=Result(text, {"n": idx}))


def _err(job_id: str, idx: int) -> OutcomeWrite:
    return OutcomeWrite(job_id, idx, error="Boom: no", hint="check the URL")


# ---------------------------------------------------------------------------------------------
# Creating jobs: reuse and caps


async def test_create_job_stores_it_running_with_pending_targets(job_store: JobStore) -> None:
    job, reused = await _create(job_store, n=3)
    assert not reused
    assert (job.status, job.targets_total, job.targets_done) == (JobState.RUNNING, 3, 0)
    assert job.expires_at == T0 + TTL
    status = await job_store.get_status(job.id, now=T0)
    assert status is not None
    stored, targets = status
    assert stored == job
    assert [t.url for t in targets] == ["u:0", "u:1", "u:2"]
    # The first target is due, so it reads as running; the rest are pending.
    assert [t.status for t in targets] == [
        TargetState.RUNNING,
        TargetState.PENDING,
        TargetState.PENDING,
    ]


async def test_same_caller_same_targets_within_lease_reuses_the_job(job_store: JobStore) -> None:
    first, _ = await _create(job_store)
    again, reused = await _create(job_store, now=T0 + TTL - 1)
    assert reused and again.id == first.id
    other, reused_by_other = await _create(job_store, caller="bob")
    assert not reused_by_other and other.id != first.id
    # Once the lease has lapsed the same targets make a new job.
    later, reused_later = await _create(job_store, now=T0 + TTL + 1)
    assert not reused_later and later.id != first.id


async def test_caps_refuse_with_typed_errors_and_write_nothing(job_store: JobStore) -> None:
    with pytest.raises(TooManyTargets):
        await _create(job_store, n=5)
    await _create(job_store, prefix="a:")
    await _create(job_store, prefix="b:")
    with pytest.raises(CallerBusy):
        await _create(job_store, prefix="c:")
    await _create(job_store, caller="bob", prefix="d:")
    with pytest.raises(Busy):
        await _create(job_store, caller="carol", prefix="e:")
    assert len(await job_store.list_jobs(now=T0)) == 3
    with pytest.raises(InvalidTargets):
        await job_store.create_job(NewJob("alice", "default", [], **CAPS), now=T0)


async def test_a_create_answers_reuse_and_caps_and_writes_nothing_when_refused(
    job_store: JobStore,
) -> None:
    first, _ = await _create(job_store)
    again, reused = await _create(job_store, now=T0 + TTL - 1)
    assert reused and again == first  # reused, cap or not
    with pytest.raises(TooManyTargets):
        await _create(job_store, n=5, prefix="x:")
    second, _ = await _create(job_store, prefix="b:", now=T0 + 1)
    with pytest.raises(CallerBusy) as busy:
        await _create(job_store, prefix="c:", now=T0 + 1)
    assert busy.value.job_id == second.id  # the caller's newest live job
    await _create(job_store, caller="bob", prefix="d:")
    with pytest.raises(Busy):
        await _create(job_store, caller="carol")
    assert len(await job_store.list_jobs(now=T0)) == 3


async def test_concurrent_creates_never_exceed_the_caps(job_store: JobStore) -> None:
    outcomes: list[str] = []

    async def submit(i: int) -> None:
        try:
            _, reused = await _create(job_store, caller=f"c{i % 4}", prefix=f"p{i % 6}:")
            outcomes.append("reused" if reused else "created")
        except (CallerBusy, Busy) as exc:
            outcomes.append(type(exc).__name__)

    async with trio.open_nursery() as nursery:
        for i in range(24):
            nursery.start_soon(submit, i)
    jobs = await job_store.list_jobs(now=T0)
    live = [job for job in jobs if job.status.is_live]
    assert len(live) == outcomes.count("created") <= CAPS["jobs_total"]
    for caller in {job.caller for job in live}:
        assert sum(job.caller == caller for job in live) <= CAPS["jobs_per_caller"]
    assert len({(job.caller, job.idem_key) for job in jobs}) == len(jobs)


# ---------------------------------------------------------------------------------------------
# Outcomes, leases and terminal statuses


async def test_outcomes_bump_the_lease_and_the_last_sets_the_terminal_status(
    job_store: JobStore,
) -> None:
    job, _ = await _create(job_store, n=2)
    after_first = await job_store.record_outcome(_ok(job.id, 0), ttl=TTL, now=T0 + 10)
    assert after_first is not None
    assert (after_first.targets_done, after_first.status) == (1, JobState.RUNNING)
    assert after_first.expires_at == T0 + 10 + TTL
    last = await job_store.record_outcome(_err(job.id, 1), ttl=TTL, now=T0 + 20)
    assert last is not None
    assert (last.status, last.targets_done, last.targets_failed) == (JobState.PARTIAL, 2, 1)
    assert (last.targets_succeeded, last.targets_unfinished) == (1, 0)
    status = await job_store.get_status(job.id, now=T0 + 21)
    assert status is not None
    _, targets = status
    assert targets[0].result == Result("x", {"n": 0})
    assert (targets[1].error, targets[1].hint) == ("Boom: no", "check the URL")
    assert targets[1].finished_at == T0 + 20


async def test_targets_read_back_are_plain_target_status_values(job_store: JobStore) -> None:
    # Stores decode a result only when it is first read (a status read is mostly looked at
    # for statuses and errors); what comes back must still behave as a TargetStatus value.
    job, _ = await _create(job_store, n=3)
    await job_store.record_outcome(_ok(job.id, 0, "<b>x</b>"), ttl=TTL, now=T0 + 1)
    await job_store.record_outcome(_err(job.id, 1), ttl=TTL, now=T0 + 2)
    status = await job_store.get_status(job.id, now=T0 + 3)
    assert status is not None
    done, failed, pending = status[1]
    by_hand = TargetStatus(
        0, "u:0", TargetState.DONE, Result("<b>x</b>", {"n": 0}), None, None,
        finished_at=T0 + 1, attempts=1,
    )  # fmt: skip
    assert done == by_hand and by_hand == done
    assert repr(done) == repr(by_hand)
    assert pickle.loads(pickle.dumps(done)) == by_hand
    assert dataclasses.asdict(done) == dataclasses.asdict(by_hand)
    assert dataclasses.replace(done, url="u:9") == dataclasses.replace(by_hand, url="u:9")
    assert done.to_json() == by_hand.to_json()
    with pytest.raises(dataclasses.FrozenInstanceError):
        done.result = None  # type: ignore[misc]
    assert done.result == Result("<b>x</b>", {"n": 0})  # the refused assignment changed nothing
    failed_by_hand = TargetStatus(
        1, "u:1", TargetState.FAILED, None, "Boom: no", "check the URL",
        finished_at=T0 + 2, attempts=1,
    )  # fmt: skip
    assert failed == failed_by_hand and hash(failed) == hash(failed_by_hand)
    assert pending.result is None and pending.status is TargetState.RUNNING  # the one due next


async def test_targets_read_back_with_the_options_they_were_submitted_with(
    job_store: JobStore,
) -> None:
    targets = [
        Target("u:0"),  # the default options, stored as "{}"
        Target("u:1", Options(mode="text", context=True)),
        Target("u:2", Options()),  # equal to the default, though not the same object
    ]
    job, _ = await job_store.create_job(
        NewJob("alice", "default", targets, **CAPS, status=JobState.RUNNING), now=T0
    )
    status = await job_store.get_status(job.id, now=T0 + 1)
    assert status is not None
    assert [t.options for t in status[1]] == [Options(), targets[1].options, Options()]
    assert status[1][1].options.to_json() == {"mode": "text", "context": True}


@pytest.mark.parametrize("idx", [-1, 2, 2**31, 2**70, True, "0", 0.0, None, [0]])
async def test_a_target_index_that_cannot_exist_reads_as_absent(
    job_store: JobStore, idx: object
) -> None:
    job, _ = await _create(job_store, n=2)
    assert await job_store.get_target(job.id, idx, now=T0 + 1) is None  # type: ignore[arg-type]
    found = await job_store.get_target(job.id, 1, now=T0 + 1)
    assert found is not None and found[1].idx == 1


@pytest.mark.parametrize(
    ("failures", "final"),
    [(0, JobState.DONE), (1, JobState.PARTIAL), (2, JobState.FAILED)],
)
async def test_terminal_status_follows_the_failures(
    job_store: JobStore, failures: int, final: JobState
) -> None:
    job, _ = await _create(job_store, n=2)
    for idx in range(2):
        write = _err(job.id, idx) if idx < failures else _ok(job.id, idx)
        stored = await job_store.record_outcome(write, ttl=TTL, now=T0)
    assert stored is not None and stored.status is final


async def test_an_outcome_keeps_how_many_attempts_it_took(job_store: JobStore) -> None:
    job, _ = await _create(job_store, n=2)
    write = OutcomeWrite(job.id, 0, error="RetryableError: busy", hint="later", attempts=3)
    await job_store.record_outcome(write, ttl=TTL, now=T0)
    status = await job_store.get_status(job.id, now=T0)
    assert status is not None
    assert [t.attempts for t in status[1]] == [3, 0]  # none yet for a target without outcome
    assert status[1][0].to_json()["attempts"] == 3


async def test_an_outcome_is_never_overwritten(job_store: JobStore) -> None:
    job, _ = await _create(job_store, n=2)
    await job_store.record_outcome(_ok(job.id, 0, "first"), ttl=TTL, now=T0)
    with pytest.raises(OutcomeExists):
        await job_store.record_outcome(_ok(job.id, 0, "second"), ttl=TTL, now=T0)
    with pytest.raises(OutcomeExists):
        await job_store.record_outcome(_ok(job.id, 7), ttl=TTL, now=T0)
    stored = await job_store.get_job(job.id, now=T0)
    assert stored is not None and stored.targets_done == 1
    status = await job_store.get_status(job.id, now=T0)
    assert status is not None and status[1][0].result == Result("first", {"n": 0})


async def test_outcomes_ready_together_each_get_their_own_answer(job_store: JobStore) -> None:
    """Concurrent writes may share a commit (group commit); each is all-or-nothing on its own."""
    a, _ = await _create(job_store, caller="a", n=2)
    b, _ = await _create(job_store, caller="b", n=2)
    await job_store.record_outcome(_ok(a.id, 0), ttl=TTL, now=T0)
    answers: dict[str, Any] = {}

    async def write(name: str, w: OutcomeWrite) -> None:
        try:
            answers[name] = await job_store.record_outcome(w, ttl=TTL, now=T0 + 1)
        except OutcomeExists as exc:
            answers[name] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, "a-again", _ok(a.id, 0))  # refused: it has an outcome
        nursery.start_soon(write, "b0", _ok(b.id, 0))
        nursery.start_soon(write, "a1", _err(a.id, 1))
    assert isinstance(answers["a-again"], OutcomeExists)
    assert answers["b0"].id == b.id and answers["b0"].targets_done == 1
    assert answers["a1"].id == a.id and answers["a1"].status is JobState.PARTIAL
    stored_a = await job_store.get_job(a.id, now=T0 + 1)
    assert stored_a is not None and (stored_a.targets_done, stored_a.targets_failed) == (2, 1)


async def test_every_outcome_answer_is_the_job_as_stored(job_store: JobStore) -> None:
    """Live, cancelled meanwhile, or at its last outcome: the answer is the stored job."""
    job, _ = await _create(job_store, n=3)
    first = await job_store.record_outcome(_ok(job.id, 0), ttl=TTL, now=T0 + 1)
    assert first is not None and first == await job_store.get_job(job.id, now=T0 + 1)
    assert (first.targets_done, first.expires_at) == (1, T0 + 1 + TTL)
    assert await job_store.finish_job(job.id, JobState.CANCELLED, now=T0 + 2) is not None
    late = await job_store.record_outcome(_err(job.id, 1), ttl=TTL, now=T0 + 3)
    assert late is not None and late == await job_store.get_job(job.id, now=T0 + 3)
    assert (late.status, late.targets_done, late.targets_failed) == (JobState.CANCELLED, 2, 1)
    last = await job_store.record_outcome(_ok(job.id, 2), ttl=TTL, now=T0 + 4)
    assert last is not None and last == await job_store.get_job(job.id, now=T0 + 4)
    assert last.targets_done == 3 and last.status is JobState.CANCELLED


async def test_a_lapsed_job_takes_no_outcome_and_reads_as_absent(job_store: JobStore) -> None:
    job, _ = await _create(job_store)
    assert await job_store.record_outcome(_ok(job.id, 0), ttl=TTL, now=T0 + TTL) is None
    assert await job_store.get_job(job.id, now=T0 + TTL) is None
    assert await job_store.get_status(job.id, now=T0 + TTL) is None
    assert await job_store.get_job(job.id, now=T0 + TTL - 1) is not None


async def test_at_the_instant_a_lease_lapses_the_job_is_gone_for_every_operation(
    job_store: JobStore,
) -> None:
    # A lease lasts up to, not including, expires_at: every backend draws the line there.
    job, _ = await _create(job_store)
    lapse = job.expires_at
    before = lapse - 0.5
    assert await job_store.get_job(job.id, now=before) is not None
    assert await job_store.purge_expired(now=before, batch_size=10) == 0
    assert await job_store.get_job(job.id, now=lapse) is None
    assert await job_store.get_status(job.id, now=lapse) is None
    assert await job_store.get_overview(job.id, now=lapse) is None
    assert await job_store.get_target(job.id, 0, now=lapse) is None
    assert await job_store.get_outcomes(job.id, 0, now=lapse, limit=10) is None
    assert await job_store.list_jobs(now=lapse) == []
    assert await job_store.list_caller_jobs("alice", now=lapse, limit=10) == []
    assert sum((await job_store.counts(now=lapse)).jobs.values()) == 0
    # The same targets resubmitted at that instant make a new job, which reads back.
    again, reused = await _create(job_store, now=lapse)
    assert not reused and again.id != job.id
    assert await job_store.get_job(again.id, now=lapse) == again
    # A purge at that instant deletes the lapsed job and leaves the new one.
    assert await job_store.purge_expired(now=lapse, batch_size=10) == 1
    assert [j.id for j in await job_store.list_jobs(now=lapse)] == [again.id]


async def test_finish_job_sets_a_terminal_status_once(job_store: JobStore) -> None:
    job, _ = await _create(job_store)
    cancelled = await job_store.finish_job(job.id, JobState.CANCELLED, now=T0 + 1)
    assert cancelled is not None and cancelled.status is JobState.CANCELLED
    assert await job_store.finish_job(job.id, JobState.FAILED, error="x", now=T0 + 2) is None
    # The outcome in flight at the cancel is still stored, and the status stays cancelled.
    stored = await job_store.record_outcome(_ok(job.id, 0), ttl=TTL, now=T0 + 3)
    assert stored is not None and stored.status is JobState.CANCELLED
    assert await job_store.finish_job("not-an-id", JobState.CANCELLED, now=T0) is None
    assert await job_store.finish_job("A" * 22, JobState.CANCELLED, now=T0) is None


# ---------------------------------------------------------------------------------------------
# Restarts, shutdown, retention


async def test_a_reap_returns_each_job_with_the_trace_context_stored_at_create(
    job_store: JobStore,
) -> None:
    traced = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    a, _ = await _create(job_store, caller="a", trace_context=traced)
    b, _ = await _create(job_store, caller="b")
    async with job_store.claim():
        reaped = await job_store.reap_orphans(now=T0 + 1)
    assert sorted(reaped, key=lambda r: r.job_id) == sorted(
        [ReapedJob(a.id, traced), ReapedJob(b.id, None)], key=lambda r: r.job_id
    )


async def test_a_claimed_delivery_carries_the_trace_context_stored_with_its_job(
    job_store: JobStore,
) -> None:
    traced = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    hook = "https://hooks.example/x"
    a, _ = await _create(job_store, caller="a", n=1, trace_context=traced, webhook_url=hook)
    b, _ = await _create(job_store, caller="b", n=1, webhook_url=hook)
    async with job_store.claim():
        await job_store.finish_job(a.id, JobState.CANCELLED, now=T0 + 1)
        await job_store.finish_job(b.id, JobState.CANCELLED, now=T0 + 2)
        first = await job_store.claim_delivery(now=T0 + 3, lease=60)
        second = await job_store.claim_delivery(now=T0 + 3, lease=60)
    assert first is not None and second is not None
    assert {(first.job_id, first.trace_context), (second.job_id, second.trace_context)} == {
        (a.id, traced),
        (b.id, None),
    }


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://hooks.example/\x00x", "U+0000 at position 22"),
        ("https://hooks.example/\ud800", "U+D800 at position 22"),
        ("https://hooks.example/\x1b[2J", "U+001B at position 22"),
        ("https://hooks.example/\u202ex", "U+202E at position 22"),
        ("", "must be a non-empty string"),
        (5, "must be a non-empty string"),
    ],
)
async def test_a_webhook_url_no_store_can_keep_is_refused_alike_before_any_write(
    job_store: JobStore, url: Any, message: str
) -> None:
    # SQLite stored a NUL that PostgreSQL refused as an outage (StoreUnavailable), and a lone
    # surrogate escaped both as a UnicodeEncodeError: one typed refusal, nothing stored.
    with pytest.raises(InvalidRequest, match=re.escape(message)):
        await _create(job_store, n=1, webhook_url=url)
    job, _ = await _create(job_store, n=1, webhook_url="https://hooks.example/x")
    assert job.targets_total == 1  # the store took the next one: nothing was left behind
    assert [j.id for j in await job_store.list_jobs(now=T0)] == [job.id]


@pytest.mark.parametrize("caller", ["a\x00b", "a\ud800", "a\x1b[2J", ""])
async def test_a_caller_no_job_can_have_reads_as_an_unknown_caller(
    job_store: JobStore, caller: str
) -> None:
    # Such a name went to the database: SQLite answered "none" for a NUL where PostgreSQL
    # failed the read as an outage (StoreUnavailable), and a lone surrogate escaped every
    # backend as a UnicodeEncodeError.
    job, _ = await _create(job_store, n=1)
    assert await job_store.list_jobs(caller=caller, now=T0) == []
    assert await job_store.list_caller_jobs(caller, now=T0, limit=10) == []
    assert await job_store.latest_retry(job.id, caller=caller, now=T0) is None
    assert await job_store.retries(job.id, caller=caller, now=T0, limit=5) == []
    assert await job_store.forget_job(job.id, caller=caller, now=T0) is None
    assert await job_store.list_caller_jobs("alice", now=T0, limit=10) == [job]


async def test_a_claim_passes_over_busy_destinations(job_store: JobStore) -> None:
    busy, free = "https://busy.example/x", "https://free.example/x"
    a, _ = await _create(job_store, caller="a", n=1, prefix="a:", webhook_url=busy)
    b, _ = await _create(job_store, caller="b", n=1, prefix="b:", webhook_url=free)
    async with job_store.claim():
        await job_store.finish_job(a.id, JobState.CANCELLED, now=T0 + 1)  # due first
        await job_store.finish_job(b.id, JobState.CANCELLED, now=T0 + 2)
        got = await job_store.claim_delivery(now=T0 + 3, lease=60, skip_urls={busy})
        assert got is not None and got.job_id == b.id
        assert await job_store.claim_delivery(now=T0 + 3, lease=60, skip_urls={busy}) is None
        left = await job_store.claim_delivery(now=T0 + 3, lease=60)
    assert left is not None and left.job_id == a.id


async def test_a_claim_passes_over_every_url_of_a_busy_destination(job_store: JobStore) -> None:
    busy = "https://busy.example"
    skipped = [f"{busy}/hook/1", f"{busy}?job=2", f"{busy}#3", busy]
    lookalike = "https://busy.example.org/hook"  # another host, the same first letters
    jobs = []
    for i, url in enumerate([*skipped, lookalike]):
        job, _ = await _create(
            job_store, caller=f"c{i}", n=1, prefix=f"{i}:", webhook_url=url, jobs_total=9
        )
        jobs.append(job)
    async with job_store.claim():
        for i, job in enumerate(jobs):
            await job_store.finish_job(job.id, JobState.CANCELLED, now=T0 + 1 + i)
        got = await job_store.claim_delivery(now=T0 + 9, lease=60, skip_urls={busy})
        assert got is not None and got.url == lookalike
        assert await job_store.claim_delivery(now=T0 + 9, lease=60, skip_urls={busy}) is None


async def test_a_redelivery_joins_the_attempt_in_flight(job_store: JobStore) -> None:
    a, _ = await _create(job_store, caller="a", n=1, webhook_url="https://hooks.example/x")
    async with job_store.claim():
        await job_store.finish_job(a.id, JobState.CANCELLED, now=T0 + 1)
        event = await job_store.claim_delivery(now=T0 + 2, lease=60)
        assert event is not None
        assert await job_store.redeliver(a.id, now=T0 + 3) is not None
        # The attempt's lease holds: no second claim of the same event beside it.
        assert await job_store.claim_delivery(now=T0 + 4, lease=60) is None
        assert await job_store.record_delivery(
            event, answer="HTTP 204", delivered=True, now=T0 + 5, next_at=None
        )
        delivery = await job_store.get_delivery(a.id, now=T0 + 5)
        assert delivery is not None and delivery.state == "delivered"
        # Without an attempt in flight, a redelivery makes the event due again.
        assert await job_store.redeliver(a.id, now=T0 + 6) is not None
        again = await job_store.claim_delivery(now=T0 + 7, lease=60)
    assert again is not None and again.id == event.id


async def test_a_failed_attempt_begun_before_a_redelivery_keeps_the_new_round(
    job_store: JobStore,
) -> None:
    # The runner schedules a failure from the round it claimed: on its last attempt (or a
    # day on) that is "give up", and the redelivery asked for meanwhile was silently lost.
    a, _ = await _create(job_store, caller="a", n=1, webhook_url="https://hooks.example/x")
    async with job_store.claim():
        await job_store.finish_job(a.id, JobState.CANCELLED, now=T0 + 1)
        event = await job_store.claim_delivery(now=T0 + 2, lease=60)
        assert event is not None
        assert await job_store.redeliver(a.id, now=T0 + 3) is not None
        assert await job_store.record_delivery(
            event, answer="HTTP 503", delivered=False, now=T0 + 5, next_at=None
        )
        delivery = await job_store.get_delivery(a.id, now=T0 + 5)
        assert delivery is not None and delivery.state == "pending"
        assert (delivery.next_attempt_at, delivery.attempts) == (T0 + 3, 0)
        assert delivery.last_answer == "HTTP 503"
        again = await job_store.claim_delivery(now=T0 + 6, lease=60)
    assert again is not None and again.id == event.id and again.round_from == T0 + 3


async def test_a_delivery_in_flight_is_next_due_when_its_lease_ends(job_store: JobStore) -> None:
    # Its due time, already past, woke the delivery task at once, again and again, until
    # the attempt ended.
    a, _ = await _create(job_store, caller="a", n=1, webhook_url="https://hooks.example/x")
    async with job_store.claim():
        await job_store.finish_job(a.id, JobState.CANCELLED, now=T0 + 1)
        assert await job_store.next_delivery_due() == T0 + 1
        assert await job_store.claim_delivery(now=T0 + 2, lease=60) is not None
        assert await job_store.next_delivery_due() == T0 + 62


async def test_claim_reap_and_shutdown_fail_live_jobs_and_keep_outcomes(
    job_store: JobStore,
) -> None:
    live, _ = await _create(job_store, caller="a", n=2)
    done, _ = await _create(job_store, caller="b", n=1)
    await job_store.record_outcome(_ok(live.id, 0), ttl=TTL, now=T0)
    await job_store.record_outcome(_ok(done.id, 0), ttl=TTL, now=T0)
    async with job_store.claim():
        assert len(await job_store.reap_orphans(now=T0 + 1)) == 1
        reaped = await job_store.get_status(live.id, now=T0 + 1)
        assert reaped is not None
        assert (reaped[0].status, reaped[0].error) == (JobState.FAILED, "restart")
        assert reaped[1][0].result == Result("x", {"n": 0})  # finished work stays readable
        assert reaped[1][1].status is TargetState.PENDING  # never resumed
        fresh, _ = await _create(job_store, caller="c", now=T0 + 2)
        assert await job_store.fail_own_jobs("shutdown", now=T0 + 3) == 1
    shut = await job_store.get_job(fresh.id, now=T0 + 3)
    assert shut is not None and (shut.status, shut.error) == (JobState.FAILED, "shutdown")
    finished = await job_store.get_job(done.id, now=T0 + 3)
    assert finished is not None and finished.status is JobState.DONE


async def test_purge_deletes_lapsed_jobs_in_bounded_batches(job_store: JobStore) -> None:
    ids = []
    for i in range(5):
        job, _ = await _create(job_store, caller=f"c{i}", now=T0 + i, jobs_total=10)
        ids.append(job.id)
    # At T0 + TTL + 2.5 the leases of the first three jobs have lapsed.
    now = T0 + TTL + 2.5
    assert await job_store.purge_expired(now=now, batch_size=2) == 2
    assert await job_store.purge_expired(now=now, batch_size=2) == 1
    assert await job_store.purge_expired(now=now, batch_size=2) == 0
    remaining = {job.id for job in await job_store.list_jobs(now=T0)}
    assert remaining == set(ids[3:])


# ---------------------------------------------------------------------------------------------
# Reads


async def test_list_jobs_newest_activity_first_and_by_caller(job_store: JobStore) -> None:
    a, _ = await _create(job_store, caller="a", now=T0)
    b, _ = await _create(job_store, caller="b", now=T0 + 1)
    await job_store.record_outcome(_ok(a.id, 0), ttl=TTL, now=T0 + 2)  # a is now the newest
    assert [job.id for job in await job_store.list_jobs(now=T0 + 3)] == [a.id, b.id]
    assert [job.id for job in await job_store.list_jobs(now=T0 + 3, caller="b")] == [b.id]
    assert len(await job_store.list_jobs(now=T0 + 3, limit=1)) == 1


async def test_counts_cover_unexpired_jobs_by_status(job_store: JobStore) -> None:
    a, _ = await _create(job_store, caller="a", n=2, now=T0)
    b, _ = await _create(job_store, caller="b", n=3, now=T0)
    await job_store.record_outcome(_ok(a.id, 0), ttl=TTL, now=T0)
    await job_store.record_outcome(_err(a.id, 1), ttl=TTL, now=T0)
    await job_store.finish_job(b.id, JobState.CANCELLED, now=T0)
    counts = await job_store.counts(now=T0 + 1)
    assert counts.jobs["partial"] == 1 and counts.jobs["cancelled"] == 1
    assert counts.jobs["running"] == 0 and set(counts.jobs) == {str(s) for s in JobState}
    assert (counts.targets_total, counts.targets_done, counts.targets_failed) == (5, 2, 1)
    # b was cancelled before any target ran: its 3 targets will never run.
    assert (counts.targets_abandoned, counts.targets_unfinished) == (3, 0)
    lapsed = await job_store.counts(now=T0 + TTL + 1)
    assert sum(lapsed.jobs.values()) == 0 and lapsed.targets_total == 0


async def test_malformed_and_unknown_ids_read_as_absent(job_store: JobStore) -> None:
    for bad in ["", "x", "A" * 22, "../../etc", "A" * 1000, "é" * 22]:
        assert await job_store.get_job(bad, now=T0) is None
        assert await job_store.get_status(bad, now=T0) is None


async def test_a_closed_store_refuses_calls_with_a_typed_error(tmp_path: Path) -> None:
    from trio_batch import StoreError

    store = open_store(tmp_path / "closed.db")
    await store.aclose()
    with pytest.raises(StoreError, match="closed"):
        await store.get_job("A" * 22, now=T0)


# ---------------------------------------------------------------------------------------------
# Forgetting, the small job view, one target, a caller's pages


async def test_forget_deletes_a_terminal_job_and_refuses_a_live_one(job_store: JobStore) -> None:
    from trio_batch import JobLive

    live, _ = await _create(job_store, caller="a", n=1)
    with pytest.raises(JobLive):
        await job_store.forget_job(live.id, now=T0)
    await job_store.record_outcome(_ok(live.id, 0), ttl=TTL, now=T0)  # now done
    assert await job_store.forget_job(live.id, caller="someone-else", now=T0) is None
    forgotten = await job_store.forget_job(live.id, caller="a", now=T0)
    assert forgotten is not None and forgotten.status is JobState.DONE
    assert await job_store.get_status(live.id, now=T0) is None
    assert await job_store.forget_job(live.id, now=T0) is None  # gone already
    # The same targets can be submitted again at once: a new job, not a reuse.
    again, reused = await _create(job_store, caller="a", n=1)
    assert not reused and again.id != live.id


async def test_the_overview_has_sizes_not_results_and_a_target_has_its_result(
    job_store: JobStore,
) -> None:
    job, _ = await _create(job_store, n=3)
    await job_store.record_outcome(_ok(job.id, 0, "x" * 1000), ttl=TTL, now=T0)
    await job_store.record_outcome(_err(job.id, 1), ttl=TTL, now=T0)
    overview = await job_store.get_overview(job.id, now=T0)
    assert overview is not None
    stored, targets, sizes = overview
    assert stored.targets_done == 2
    assert [t.result for t in targets] == [None, None, None]
    assert [str(t.status) for t in targets] == ["done", "failed", "running"]
    assert sizes[0] > 1000 and sizes[1:] == [0, 0]
    one = await job_store.get_target(job.id, 0, now=T0)
    assert one is not None and one[1].result == Result("x" * 1000, {"n": 0})
    due = await job_store.get_target(job.id, 2, now=T0)
    assert due is not None and str(due[1].status) == "running"
    assert await job_store.get_target(job.id, 9, now=T0) is None
    assert await job_store.get_overview("A" * 22, now=T0) is None


async def test_outcomes_are_read_in_pages_from_an_index_on(job_store: JobStore) -> None:
    job, _ = await _create(job_store, n=4)
    await job_store.record_outcome(_ok(job.id, 0), ttl=TTL, now=T0)
    await job_store.record_outcome(_err(job.id, 1), ttl=TTL, now=T0)
    await job_store.record_outcome(_ok(job.id, 2, "y"), ttl=TTL, now=T0)
    found = await job_store.get_outcomes(job.id, 0, now=T0, limit=10)
    assert found is not None
    stored, targets = found
    assert stored.targets_done == 3  # the job from the same snapshot
    assert [(t.idx, str(t.status)) for t in targets] == [(0, "done"), (1, "failed"), (2, "done")]
    assert targets[0].result == Result("x", {"n": 0}) and targets[1].error == "Boom: no"
    page = await job_store.get_outcomes(job.id, 1, now=T0, limit=1)
    assert page is not None and [t.idx for t in page[1]] == [1]
    rest = await job_store.get_outcomes(job.id, 2, now=T0, limit=10)
    assert rest is not None and [t.idx for t in rest[1]] == [2]  # target 3 is still pending
    assert await job_store.get_outcomes(job.id, 3, now=T0, limit=10) == (stored, [])
    assert await job_store.get_outcomes("A" * 22, 0, now=T0, limit=10) is None
    assert await job_store.get_outcomes(job.id, 0, now=T0 + 10 * TTL, limit=10) is None  # lapsed


async def test_a_watchers_page_is_bounded_by_its_results_size(job_store: JobStore) -> None:
    # With 10 MB results a page of 256 outcomes held 2.5 GB: the size bounds it too.
    job, _ = await _create(job_store, n=5, targets_per_job=5)
    await job_store.record_outcome(_ok(job.id, 0, "y" * 3000), ttl=TTL, now=T0)
    await job_store.record_outcome(_err(job.id, 1), ttl=TTL, now=T0)  # no result: size 0
    await job_store.record_outcome(_ok(job.id, 2, "y" * 1000), ttl=TTL, now=T0)
    await job_store.record_outcome(_ok(job.id, 3, "y" * 1000), ttl=TTL, now=T0)

    async def idxs(start: int, max_bytes: int | None, limit: int = 8) -> list[int]:
        page = await job_store.get_outcomes(job.id, start, now=T0, limit=limit, max_bytes=max_bytes)
        assert page is not None
        return [t.idx for t in page[1]]

    # The first outcome comes even past the bound; then each until one takes it past.
    assert await idxs(0, 5) == [0]
    assert await idxs(0, 3100) == [0, 1, 2]
    assert await idxs(1, 1000) == [1, 2]
    assert await idxs(1, 1500) == [1, 2, 3]
    assert await idxs(1, 1500, limit=2) == [1, 2]  # the count still bounds it
    assert await idxs(4, 1) == []  # target 4 is still pending
    assert await idxs(0, None) == [0, 1, 2, 3]
    page = await job_store.get_outcomes(job.id, 2, now=T0, limit=8, max_bytes=10**9)
    assert page is not None and [t.result for t in page[1]] == [
        Result("y" * 1000, {"n": 2}),
        Result("y" * 1000, {"n": 3}),
    ]
    assert await job_store.get_outcomes("A" * 22, 0, now=T0, limit=8, max_bytes=1) is None


async def test_a_watcher_reads_no_result_over_its_cut_only_the_results_length(
    job_store: JobStore,
) -> None:
    # The event stream sends a big result as a link: loading it only to size it cost a
    # stream of 10 MB results 10 MB a target.
    job, _ = await _create(job_store, n=3, targets_per_job=3)
    big, small = _ok(job.id, 0, "é" * 3000), _ok(job.id, 2, "y" * 10)
    for write in (big, _err(job.id, 1), small):
        await job_store.record_outcome(write, ttl=TTL, now=T0)
    stored = {}
    for write in (big, small):
        assert write.result is not None
        stored[write.idx] = len(write.result.to_json_text())  # characters, as the cut counts
    for max_bytes in (None, 10**9):  # the cut holds with or without a size bound
        page = await job_store.get_outcomes(
            job.id, 0, now=T0, limit=8, max_bytes=max_bytes, results_up_to=stored[2]
        )
        assert page is not None
        first, failed, last = page[1]
        assert (first.result, first.result_size) == (None, stored[0])
        assert (failed.result, failed.result_size, failed.error) == (None, None, "Boom: no")
        assert (last.result, last.result_size) == (small.result, None)  # at the cut: read
    whole = await job_store.get_outcomes(job.id, 0, now=T0, limit=8)
    assert whole is not None and whole[1][0].result == big.result
    assert whole[1][0].result_size is None


async def test_a_callers_jobs_come_in_stable_pages_newest_first(job_store: JobStore) -> None:
    ids = []
    for i in range(5):
        job, _ = await _create(
            job_store, caller="pager", now=T0 + i, prefix=f"p{i}:", jobs_total=9, jobs_per_caller=9
        )
        ids.append(job.id)
    await _create(job_store, caller="other", now=T0 + 10, jobs_total=9)
    first = await job_store.list_caller_jobs("pager", now=T0 + 20, limit=2)
    assert [j.id for j in first] == ids[::-1][:2]
    last = first[-1]
    second = await job_store.list_caller_jobs(
        "pager", now=T0 + 20, limit=10, before=(last.created_at, last.id)
    )
    assert [j.id for j in second] == ids[::-1][2:]


# ---------------------------------------------------------------------------------------------
# Custom ids, metadata and parents


async def test_custom_ids_metadata_and_parent_are_stored_and_read_back(
    job_store: JobStore,
) -> None:
    targets = [Target("u:0", custom_id="first"), Target("u:1"), Target("u:2", custom_id="c")]
    labels = {"team": "search", "run": "2026-12-01"}
    caps = {**CAPS, "jobs_per_caller": 9, "jobs_total": 9}
    parent, _ = await _create(job_store, "alice", 1, prefix="p:", **caps)
    new = NewJob(
        "alice",
        "default",
        targets,
        **caps,
        status=JobState.RUNNING,
        metadata=labels,
        parent_id=parent.id,
    )
    job, reused = await job_store.create_job(new, now=T0)
    assert not reused
    assert (job.metadata, job.parent_id) == (labels, parent.id)
    assert await job_store.get_job(job.id, now=T0) == job
    bumped = await job_store.record_outcome(_ok(job.id, 0), ttl=TTL, now=T0 + 1)
    assert bumped is not None and (bumped.metadata, bumped.parent_id) == (labels, parent.id)
    last = await job_store.record_outcome(_err(job.id, 1), ttl=TTL, now=T0 + 2)
    assert last is not None and last.metadata == labels
    found = await job_store.get_status(job.id, now=T0 + 3)
    assert found is not None
    assert found[0].metadata == labels
    assert [t.custom_id for t in found[1]] == ["first", None, "c"]
    overview = await job_store.get_overview(job.id, now=T0 + 3)
    assert overview is not None and [t.custom_id for t in overview[1]] == ["first", None, "c"]
    one = await job_store.get_target(job.id, 2, now=T0 + 3)
    assert one is not None and one[1].custom_id == "c"
    listed = await job_store.list_caller_jobs("alice", now=T0 + 3, limit=10)
    assert {j.id: j.metadata for j in listed} == {job.id: labels, parent.id: {}}
    # The metadata and parent are part of the idempotency key: the same targets with other
    # metadata, or without a parent, are another job.
    again, reused = await job_store.create_job(new, now=T0)
    assert reused and again.id == job.id
    elsewhere = NewJob("alice", "default", targets, **caps, metadata={"team": "other"})
    other, reused = await job_store.create_job(elsewhere, now=T0)
    assert not reused and other.metadata == {"team": "other"} and other.parent_id is None
    unparented = NewJob("alice", "default", targets, **caps, metadata=labels)
    assert (await job_store.create_job(unparented, now=T0))[0].id not in (job.id, other.id)


async def test_jobs_with_labels_are_forgotten_and_purged(job_store: JobStore) -> None:
    labelled, _ = await _create(job_store, "alice", 1, metadata={"k": "v"})
    await job_store.record_outcome(_ok(labelled.id, 0), ttl=TTL, now=T0)
    assert await job_store.forget_job(labelled.id, now=T0) is not None
    lapsing, _ = await _create(job_store, "bob", 1, metadata={"k": "v", "x": "y"})
    assert await job_store.purge_expired(now=T0 + 10 * TTL, batch_size=10) == 1
    assert await job_store.get_job(lapsing.id, now=T0) is None


@pytest.mark.parametrize(
    ("targets", "match"),
    [
        ([Target("u:0", custom_id="a"), Target("u:1", custom_id="a")], "repeats the custom_id"),
    ],
)
async def test_repeated_custom_ids_are_refused_before_any_write(
    job_store: JobStore, targets: list[Target], match: str
) -> None:
    with pytest.raises(InvalidTargets, match=match):
        await job_store.create_job(NewJob("alice", "default", targets, **CAPS), now=T0)
    assert await job_store.list_caller_jobs("alice", now=T0, limit=10) == []


# ---------------------------------------------------------------------------------------------
# Filtered lists, export pages, retries


async def _labelled(
    store: JobStore, caller: str, i: int, labels: dict[str, str], **kwargs: Any
) -> Any:
    caps = {**CAPS, "jobs_per_caller": 99, "jobs_total": 99}
    new = NewJob(caller, "default", _targets(1, f"f{i}:"), **caps, metadata=labels, **kwargs)
    job, _ = await store.create_job(new, now=T0 + i)
    return job


async def _pages(store: JobStore, caller: str, where: JobFilter, limit: int) -> list[str]:
    """Every job the filter lists, a page at a time, as ids."""
    seen: list[str] = []
    before = None
    while True:
        page = await store.list_caller_jobs(caller, now=T0, limit=limit, before=before, where=where)
        seen += [job.id for job in page]
        if len(page) < limit:
            return seen
        before = (page[-1].created_at, page[-1].id)


async def test_filtered_lists_page_a_callers_own_jobs_only(job_store: JobStore) -> None:
    jobs = []
    for i in range(12):
        labels = {"team": "a" if i % 2 else "b", "run": str(i % 3)}
        jobs.append(await _labelled(job_store, "alice", i, labels))
        # Bob's jobs carry the same labels and times: never listed for alice.
        await _labelled(job_store, "bob", i, labels, status=JobState.RUNNING)
    for i in (1, 4, 7):
        await job_store.finish_job(jobs[i].id, JobState.CANCELLED, now=T0 + 20)
    newest = [job.id for job in reversed(jobs)]
    cases: list[tuple[JobFilter, list[int]]] = [
        (JobFilter(), list(range(12))),
        (JobFilter(statuses=frozenset({JobState.CANCELLED})), [1, 4, 7]),
        (JobFilter(statuses=frozenset({JobState.QUEUED, JobState.CANCELLED})), list(range(12))),
        (JobFilter(labels=(("team", "a"),)), [1, 3, 5, 7, 9, 11]),
        (JobFilter(labels=(("team", "a"), ("run", "1"))), [1, 7]),
        (
            JobFilter(statuses=frozenset({JobState.QUEUED}), labels=(("team", "a"),)),
            [3, 5, 9, 11],
        ),
        (JobFilter(created_after=T0 + 8), [9, 10, 11]),
        (JobFilter(created_after=T0 + 2, labels=(("run", "0"),)), [3, 6, 9]),
        (JobFilter(labels=(("team", "nobody"),)), []),
    ]
    for where, picked in cases:
        expected = [jobs[i].id for i in sorted(picked, reverse=True)]
        assert [j for j in newest if j in expected] == expected
        for limit in (1, 5, 100):
            assert await _pages(job_store, "alice", where, limit) == expected, (where, limit)
        listed = await job_store.list_caller_jobs("alice", now=T0, limit=100, where=where)
        assert all(job.caller == "alice" and where.matches(job) for job in listed)


async def test_export_pages_cover_every_target_in_order(job_store: JobStore) -> None:
    targets = [Target(f"e:{i}", custom_id=f"c{i}") for i in range(4)]
    job, _ = await job_store.create_job(
        NewJob("alice", "default", targets, **CAPS, status=JobState.RUNNING), now=T0
    )
    await job_store.record_outcome(_ok(job.id, 0), ttl=TTL, now=T0)
    await job_store.record_outcome(_err(job.id, 1), ttl=TTL, now=T0)
    first = await job_store.get_targets_after(job.id, -1, now=T0, limit=3)
    assert first is not None
    assert [(t.idx, t.custom_id, str(t.status)) for t in first[1]] == [
        (0, "c0", "done"),
        (1, "c1", "failed"),
        (2, "c2", "running"),  # due next
    ]
    assert first[1][0].result == Result("x", {"n": 0})
    rest = await job_store.get_targets_after(job.id, 2, now=T0, limit=3)
    assert rest is not None and [(t.idx, str(t.status)) for t in rest[1]] == [(3, "pending")]
    empty = await job_store.get_targets_after(job.id, 3, now=T0, limit=3)
    assert empty is not None and empty[1] == []
    assert await job_store.get_targets_after("A" * 22, -1, now=T0, limit=3) is None
    assert await job_store.get_targets_after(job.id, -1, now=T0 + 10 * TTL, limit=3) is None


async def test_an_export_page_is_bounded_by_its_results_size(job_store: JobStore) -> None:
    job, _ = await job_store.create_job(
        NewJob("alice", "default", _targets(4, "s:"), **CAPS, status=JobState.RUNNING), now=T0
    )
    for i, size in enumerate((3000, 1000, 1000, 1000)):
        await job_store.record_outcome(_ok(job.id, i, "y" * size), ttl=TTL, now=T0)

    async def idxs(after: int, max_bytes: int) -> list[int]:
        page = await job_store.get_targets_after(
            job.id, after, now=T0, limit=8, max_bytes=max_bytes
        )
        assert page is not None
        return [t.idx for t in page[1]]

    # The first row comes even past the bound; then each row until one takes it past.
    assert await idxs(-1, 5) == [0]
    assert await idxs(0, 2500) == [1, 2, 3]
    assert await idxs(0, 1500) == [1, 2]
    assert await idxs(3, 1500) == []
    page = await job_store.get_targets_after(job.id, 0, now=T0, limit=2, max_bytes=10**9)
    assert page is not None and [t.result for t in page[1]] == [
        Result("y" * 1000, {"n": 1}),
        Result("y" * 1000, {"n": 2}),
    ]


async def test_an_export_page_without_results_reads_statuses_only(job_store: JobStore) -> None:
    job, _ = await job_store.create_job(
        NewJob("alice", "default", _targets(3, "r:"), **CAPS, status=JobState.RUNNING), now=T0
    )
    await job_store.record_outcome(_ok(job.id, 0), ttl=TTL, now=T0)
    await job_store.record_outcome(_err(job.id, 1), ttl=TTL, now=T0)
    page = await job_store.get_targets_after(job.id, -1, now=T0, limit=8, results=False)
    assert page is not None
    assert [(t.idx, str(t.status), t.result, t.error) for t in page[1]] == [
        (0, "done", None, None),
        (1, "failed", None, _err(job.id, 1).error),
        (2, "running", None, None),
    ]
    bounded = await job_store.get_targets_after(
        job.id, -1, now=T0, limit=8, results=False, max_bytes=1
    )
    assert bounded is not None and [t.idx for t in bounded[1]] == [0, 1, 2]  # nothing loaded
    assert await job_store.get_targets_after("A" * 22, -1, now=T0, limit=3, results=False) is None


async def test_a_jobs_retries_are_the_callers_children_newest_first(job_store: JobStore) -> None:
    parent = await _labelled(job_store, "alice", 0, {})
    made = [(await _labelled(job_store, "alice", i, {}, parent_id=parent.id)).id for i in (1, 2, 3)]
    await _labelled(job_store, "bob", 4, {}, parent_id=parent.id)  # not alice's
    found = await job_store.retries(parent.id, caller="alice", now=T0 + 5, limit=10)
    assert [j.id for j in found] == made[::-1]
    two = await job_store.retries(parent.id, caller="alice", now=T0 + 5, limit=2)
    assert [j.id for j in two] == made[:0:-1]
    assert await job_store.retries("A" * 22, caller="alice", now=T0, limit=5) == []
    assert await job_store.retries(parent.id, caller="alice", now=T0 + 10 * TTL, limit=5) == []


async def test_the_latest_retry_is_the_callers_newest_child(job_store: JobStore) -> None:
    parent = await _labelled(job_store, "alice", 0, {})
    assert await job_store.latest_retry(parent.id, caller="alice", now=T0) is None
    first = await _labelled(job_store, "alice", 1, {}, parent_id=parent.id)
    second = await _labelled(job_store, "alice", 2, {}, parent_id=parent.id)
    await _labelled(job_store, "bob", 3, {}, parent_id=parent.id)  # not alice's
    assert first.parent_id == parent.id
    latest = await job_store.latest_retry(parent.id, caller="alice", now=T0)
    assert latest is not None and latest.id == second.id
    assert await job_store.latest_retry(parent.id, caller="carol", now=T0) is None
    assert await job_store.latest_retry("bad id", caller="alice", now=T0) is None


async def test_a_result_longer_than_max_result_size_is_stored_as_a_failure(
    job_store: JobStore,
) -> None:
    job, _ = await _create(job_store, n=2)
    fits = Result("x" * 80, {"n": 0})
    limit = len(fits.to_json_text())
    write = dataclasses.replace(_ok(job.id, 0), result=fits, max_result_size=limit)
    await job_store.record_outcome(write, ttl=TTL, now=T0)
    over = Result("x" * 80, {"n": 10})  # one character longer, in the meta
    write = dataclasses.replace(_ok(job.id, 1), result=over, max_result_size=limit)
    after = await job_store.record_outcome(write, ttl=TTL, now=T0)
    assert after is not None and after.targets_failed == 1
    found = await job_store.get_status(job.id, now=T0)
    assert found is not None
    kept, refused = found[1]
    assert kept.status == TargetState.DONE and kept.result == fits
    assert refused.status == TargetState.FAILED and refused.result is None
    assert refused.error is not None and refused.error.startswith("ResultTooLarge: ")
    assert f"the limit is {limit} (Config.max_result_size)" in refused.error
    assert refused.hint is not None and "max_result_size" in refused.hint


# --------------------------------------------------------------------------------------------
# Snapshots: what the submit check and the collection read of the store


async def test_snapshot_targets_keep_their_options_and_replay_checks_read_the_store(
    job_store: JobStore, tmp_path: Path
) -> None:
    from trio_batch.fetchers import SnapshotStore
    from trio_batch.fetchers._body import Body
    from trio_batch.fetchers._recording import Recording, ReplayRefused, check_replays
    from trio_batch.fetchers._snapshot_entry import Entry

    snaps = SnapshotStore(tmp_path / "snaps")
    recorded = Recording(snapshot=True).apply(_targets(1))
    job, _ = await job_store.create_job(
        NewJob("alice", "default", recorded, **CAPS, status=JobState.RUNNING), now=T0
    )
    found = await job_store.get_status(job.id, now=T0)
    assert found is not None and found[1][0].options == Options(snapshot=True)
    plain, _ = await _create(job_store, prefix="plain:")
    body = Body(recorded[0].url, 200, "text/plain", None, b"kept", 0)
    snaps.record_sync(job.id, "alice", Entry.of(recorded[0].url, body, T0), body.data)

    async def refused(caller: str, job_id: str, now: float = T0) -> str:
        targets = Recording(replay=job_id).apply(_targets(1))
        with pytest.raises(ReplayRefused) as info:
            await check_replays(snaps, job_store, caller, targets, now=now)
        return str(info.value)

    replay = Recording(replay=job.id, on_miss="fetch").apply(_targets(1))
    await check_replays(snaps, job_store, "alice", replay, now=T0)  # hers, live: fine
    unknown = "Z" * 22
    as_unknown = (await refused("bob", unknown)).replace(unknown, job.id)
    assert await refused("bob", job.id) == as_unknown
    assert "has no snapshot" in await refused("alice", plain.id)
    assert "lease has lapsed" in await refused("alice", job.id, now=T0 + TTL + 1)

    async def alive(job_id: str) -> bool:
        return await job_store.get_job(job_id, now=T0 + TTL + 1) is not None

    snaps.set_pin(job.id, pinned=True, shared=True)
    await check_replays(snaps, job_store, "bob", replay, now=T0 + TTL + 1)  # pinned, shared
    assert await snaps.collect(alive, grace=0) == (0, 0)
    snaps.set_pin(job.id, pinned=False)
    assert await snaps.collect(alive, grace=0) == (1, 1)
    assert "lease has lapsed" in await refused("alice", job.id, now=T0 + TTL + 1)
