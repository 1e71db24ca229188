"""Config.on_terminal: each job's terminal event, after its commit, at least once, with backoff."""

from __future__ import annotations

import trio
import trio.testing

from trio_batch import Config, Delivery, JobEvent, JobState, Runner, Store, open_runner
from trio_batch.runner._deliveries import GIVE_UP_AFTER, RETRY_DELAYS
from trio_batch.store import NewJob

from ..support.fakes import FakeClock, ScriptedFetch, urls


class Recorder:
    """An ``on_terminal`` callback that records each call, failing the first ``fail`` ones."""

    def __init__(self, store: Store | None = None, fail: int = 0) -> None:
        self.events: list[JobEvent] = []
        self.fail = fail
        self.store = store
        self.status_seen: list[str] = []
        self.changed = trio.Event()

    async def __call__(self, event: JobEvent) -> None:
        self.events.append(event)
        if self.store is not None:  # the terminal status is committed before the call
            job = self.store.get_job(event.job_id)
            self.status_seen.append("gone" if job is None else str(job.status))
        self.changed.set()
        self.changed = trio.Event()
        if len(self.events) <= self.fail:
            raise RuntimeError(f"receiver down (call {len(self.events)})")

    async def wait_for(self, n: int) -> None:
        while len(self.events) < n:
            await self.changed.wait()


async def recorded(runner: Runner, job_id: str, attempts: int) -> Delivery:
    """The job's delivery once its ``attempts``-th attempt is stored. The callback is called
    before its outcome is written (on the store thread), so a test waits for this before it
    reads the state or moves the wall clock the next delay is counted from."""
    while True:
        delivery = await runner.delivery(job_id)
        assert delivery is not None
        if delivery.attempts >= attempts:
            return delivery
        await trio.sleep(1)


async def test_each_terminal_status_is_told_once_after_its_commit(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    recorder = Recorder(store)
    config = Config(on_terminal=recorder, jobs_per_caller=4)
    async with open_runner(store, fetch, config, now=clock) as runner:
        done, _ = await runner.submit("a", "user", urls("x", "y"))
        partial, _ = await runner.submit("a", "user", urls("p", "fail"))
        failed, _ = await runner.submit("a", "user", urls("fail"))
        started, release = fetch.gate("https://example.test/gate")
        cancelled, _ = await runner.submit("a", "user", urls("gate", "z"))
        for job_id in (done, partial, failed):
            await runner.wait(job_id)
        await started.wait()
        assert await runner.cancel(cancelled)
        release.set()
        await runner.wait(cancelled)
        await recorder.wait_for(4)
        await trio.testing.wait_all_tasks_blocked()
        deliveries = {job_id: await runner.delivery(job_id) for job_id in (done, cancelled)}
    by_job = {e.job_id: e for e in recorder.events}
    assert len(recorder.events) == 4  # once each
    assert {j: e.type for j, e in by_job.items()} == {
        done: "job.done",
        partial: "job.partial",
        failed: "job.failed",
        cancelled: "job.cancelled",
    }
    assert recorder.status_seen.count("running") == 0
    data = by_job[partial].payload()["data"]
    assert data["counts"] == {"total": 2, "succeeded": 1, "failed": 1, "unfinished": 0}
    assert data["links"]["self"] == f"/v1/batches/{partial}"
    assert by_job[done].id.startswith("msg_")
    delivery = deliveries[done]
    assert delivery is not None and delivery.state == "delivered"
    assert delivery.attempts == 1 and delivery.delivered_at == clock.now


async def test_a_failing_callback_is_retried_after_each_delay_with_the_same_event_id(
    store: Store,
    fetch: ScriptedFetch,
    clock: FakeClock,
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorder = Recorder(fail=2)
    async with open_runner(store, fetch, Config(on_terminal=recorder), now=clock) as runner:
        job_id, _ = await runner.submit("a", "user", urls("x"))
        await recorder.wait_for(1)
        await trio.sleep(30)  # polls many times; the backoff is on the wall clock, which stands
        assert len(recorder.events) == 1
        delivery = await recorded(runner, job_id, 1)
        assert delivery.state == "pending"
        assert delivery.attempts == 1
        assert delivery.last_answer == "RuntimeError: receiver down (call 1)"
        assert delivery.next_attempt_at == clock.now + RETRY_DELAYS[0]
        clock.advance(RETRY_DELAYS[0] - 1)
        await trio.sleep(30)
        assert len(recorder.events) == 1  # not due yet
        clock.advance(1)
        await recorder.wait_for(2)
        await recorded(runner, job_id, 2)
        clock.advance(RETRY_DELAYS[1])
        await recorder.wait_for(3)
        delivery = await recorded(runner, job_id, 3)
        await trio.sleep(30)
    assert len(recorder.events) == 3
    assert len({e.id for e in recorder.events}) == 1
    assert delivery is not None and delivery.state == "delivered" and delivery.attempts == 3


async def test_after_a_day_of_failures_it_gives_up_and_redeliver_starts_again(
    store: Store,
    fetch: ScriptedFetch,
    clock: FakeClock,
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorder = Recorder(fail=10_000)
    start = clock.now
    async with open_runner(store, fetch, Config(on_terminal=recorder), now=clock) as runner:
        job_id, _ = await runner.submit("a", "user", urls("x"))
        for n, delay in enumerate(RETRY_DELAYS, start=1):
            await recorder.wait_for(n)
            await recorded(runner, job_id, n)
            clock.advance(delay)
        await recorder.wait_for(len(RETRY_DELAYS) + 1)
        delivery = await recorded(runner, job_id, len(RETRY_DELAYS) + 1)
        await trio.sleep(30)
        assert delivery.state == "gave_up"
        assert delivery.attempts == len(RETRY_DELAYS) + 1
        assert clock.now - start <= GIVE_UP_AFTER
        clock.advance(600)  # the job's lease (a day from its last write) has not lapsed yet
        await trio.sleep(30)
        assert len(recorder.events) == len(RETRY_DELAYS) + 1  # over: no more attempts
        again = await runner.redeliver(job_id)
        assert again is not None and again.state == "pending" and again.attempts == 0
        await recorder.wait_for(len(RETRY_DELAYS) + 2)
        clock.advance(GIVE_UP_AFTER)  # the job lapsed: nothing to send again
        assert await runner.redeliver(job_id) is None
    assert len({e.id for e in recorder.events}) == 1


async def test_jobs_failed_by_a_restart_or_a_shutdown_are_told_by_the_next_run(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    # A job left running by a runner that died: it got its outbox row when it was created.
    left, _ = store.create_job(
        NewJob(
            "a",
            "user",
            urls("x"),
            ttl=86400,
            targets_per_job=8,
            jobs_per_caller=8,
            jobs_total=8,
            status=JobState.RUNNING,
            callback=True,
        ),
        now=clock.now,
    )
    recorder = Recorder()
    config = Config(on_terminal=recorder)
    async with open_runner(store, fetch, config, now=clock) as runner:
        await recorder.wait_for(1)
        started = fetch.watch("https://example.test/hang")
        hung, _ = await runner.submit("b", "user", urls("hang"))
        await started.wait()
    assert [(e.job_id, e.type, e.error) for e in recorder.events] == [
        (left.id, "job.failed", "restart")
    ]
    async with open_runner(store, fetch, config, now=clock):
        await recorder.wait_for(2)
    assert (recorder.events[1].job_id, recorder.events[1].error) == (hung, "shutdown")


async def test_a_job_without_a_callback_or_webhook_has_no_delivery(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(store, fetch, now=clock) as runner:
        job_id, _ = await runner.submit("a", "user", urls("x"))
        await runner.wait(job_id)
        assert await runner.delivery(job_id) is None
        assert await runner.redeliver(job_id) is None
    assert store.db.execute("SELECT count(*) FROM outbox").fetchone()[0] == 0
