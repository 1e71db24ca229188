"""Webhook deliveries are fair per destination: a slow receiver holds at most
``PER_DESTINATION`` attempts, never every slot; a redelivery asked for while an attempt is in
flight joins it (no second POST of the same event beside it)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import trio

from trio_batch import Config, JobEvent, Store, open_runner
from trio_batch.runner._deliveries import PER_DESTINATION

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
            if event.url == SLOW:
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
