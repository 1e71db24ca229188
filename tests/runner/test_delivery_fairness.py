"""Webhook deliveries are fair per destination: a slow receiver holds at most
``PER_DESTINATION`` attempts, never every slot; a redelivery asked for while an attempt is in
flight joins it (no second POST of the same event beside it)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import trio
import trio.testing

from trio_batch import Config, JobEvent, Store, open_runner
from trio_batch.runner._deliveries import CONCURRENCY, PER_DESTINATION

from ..support.deliveries import delivery_reaches
from ..support.fakes import FakeClock, ScriptedFetch, urls

SLOW = "https://slow.example/hook"
FAST = "https://fast.example/hook"


class HeldReceivers:
    """A webhook deliverer: attempts to ``SLOW`` wait for :attr:`release`; others answer."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.in_flight: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.posts: list[str] = []
        self.changed = trio.Event()
        #: URLs held besides ``SLOW``.
        self.held: set[str] = set()

    def check_url(self, url: object) -> str:
        assert isinstance(url, str)
        return url

    async def deliver(self, event: JobEvent) -> str:
        assert event.url is not None
        self.posts.append(event.job_id)
        self.in_flight[event.url] += 1
        self.most[event.url] = max(self.most[event.url], self.in_flight[event.url])
        self._tell()
        try:
            if event.url == SLOW or event.url in self.held:
                await self.release.wait()
        finally:
            self.in_flight[event.url] -= 1
            self._tell()
        return "HTTP 204"

    def _tell(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, check: Any) -> None:
        while not check():
            await self.changed.wait()


CONFIG = Config(jobs_per_caller=16, jobs_total=32, poll_interval=0.05)


async def test_a_slow_receiver_never_holds_another_callers_webhook(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    receivers = HeldReceivers()
    async with open_runner(store, fetch, CONFIG, now=clock, webhooks=receivers) as runner:
        slow = []
        for i in range(12):
            job_id, _ = await runner.submit("hog", "user", urls(f"s{i}"), webhook=SLOW)
            slow.append(job_id)
        await receivers.until(lambda: receivers.in_flight[SLOW] >= PER_DESTINATION)
        fast, _ = await runner.submit("other", "user", urls("f"), webhook=FAST)
        with trio.fail_after(30):  # against a hang only: it is sent while the slow ones wait
            await delivery_reaches(runner, fast, state="delivered")
        assert receivers.in_flight[SLOW] == PER_DESTINATION
        receivers.release.set()
        for job_id in slow:
            await delivery_reaches(runner, job_id, state="delivered")
    assert receivers.most[SLOW] == PER_DESTINATION
    assert sorted(receivers.posts) == sorted([*slow, fast])  # each event once


async def test_redeliveries_during_an_attempt_join_it(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    receivers = HeldReceivers()
    async with open_runner(store, fetch, CONFIG, now=clock, webhooks=receivers) as runner:
        claims = [0]
        real = runner._store.claim_delivery

        async def counted(**kw: Any) -> Any:
            claims[0] += 1
            return await real(**kw)

        runner._store.claim_delivery = counted  # type: ignore[method-assign]
        job_id, _ = await runner.submit("a", "user", urls("x"), webhook=SLOW)
        await receivers.until(lambda: receivers.in_flight[SLOW] == 1)
        for _ in range(100):
            assert await runner.redeliver(job_id) is not None
        # The runner woke and claimed again after the redeliveries, and was given nothing.
        seen = claims[0]
        while claims[0] < seen + 3:  # noqa: ASYNC110 - the claims are another task's
            await trio.sleep(0.01)
        assert receivers.posts == [job_id]
        receivers.release.set()
        found = await delivery_reaches(runner, job_id, state="delivered")
    assert receivers.posts == [job_id] and found.attempts == 1


async def test_a_slow_receiver_with_a_url_per_job_never_holds_every_slot(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, mock_clock: trio.testing.MockClock
) -> None:
    # The bound was per URL: a receiver that gives each job its own URL (…/hook/<job>) took
    # every slot, and every other webhook waited on it. trio's clock is frozen: no poll, only
    # the wakes of jobs ending and attempts ending move the delivery task.
    receivers = HeldReceivers()
    slow_host = [f"{SLOW}/{i}?job={i}" for i in range(CONCURRENCY + 4)]
    receivers.held = set(slow_host)
    async with open_runner(store, fetch, CONFIG, now=clock, webhooks=receivers) as runner:
        for i, url in enumerate(slow_host):
            job_id, _ = await runner.submit(f"hog{i % 8}", "user", urls(f"s{i}"), webhook=url)
            await runner.wait(job_id)
        fast, _ = await runner.submit("other", "user", urls("f"), webhook=FAST)
        await runner.wait(fast)
        await trio.testing.wait_all_tasks_blocked(cushion=0.2)
        assert fast in receivers.posts  # sent while the slow ones wait
        assert sum(receivers.in_flight.values()) == PER_DESTINATION
        receivers.release.set()
