"""A resubmit that would reuse a job with another webhook, or none, raises WebhookConflict in
the library (the HTTP service answers it with 409): the webhook asked for is never dropped
without a sign. It used to return the old job, ``reused=True``, and its URL never got a POST."""

from __future__ import annotations

import pytest

from trio_batch import Config, JobEvent, JobStore, WebhookConflict, open_runner

from ..support.fakes import FakeClock, ScriptedFetch, urls

HOOK = "https://hook.example/a"
OTHER = "https://hook.example/b"
CONFIG = Config(ttl=100, targets_per_job=4, jobs_per_caller=8, jobs_total=8)


class Receivers:
    """A webhook deliverer that takes every event; its check keeps a URL as given, but with
    its host in lower case (as a real check may normalise it)."""

    def check_url(self, url: object) -> str:
        assert isinstance(url, str)
        scheme, _, rest = url.partition("://")
        host, _, path = rest.partition("/")
        return f"{scheme}://{host.lower()}/{path}"

    async def deliver(self, event: JobEvent) -> str:
        return "HTTP 204"


async def test_a_resubmit_that_would_drop_or_change_a_webhook_raises(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(job_store, fetch, CONFIG, now=clock, webhooks=Receivers()) as runner:
        plain, _ = await runner.submit("alice", "user", urls("x"))
        with pytest.raises(WebhookConflict, match="no webhook") as added:
            await runner.submit("alice", "user", urls("x"), webhook=HOOK)
        assert (added.value.job_id, added.value.webhook) == (plain, None)
        assert plain in str(added.value) and "metadata" in str(added.value)

        labels = {"k": "v"}
        hooked, reused = await runner.submit(
            "alice", "user", urls("x"), metadata=labels, webhook=HOOK
        )
        assert not reused
        # The same webhook, as its check makes it: the job is reused.
        same = await runner.submit(
            "alice", "user", urls("x"), metadata=labels, webhook=HOOK.replace("hook.", "HOOK.")
        )
        assert same == (hooked, True)
        with pytest.raises(WebhookConflict, match="another webhook URL") as changed:
            await runner.submit("alice", "user", urls("x"), metadata=labels, webhook=OTHER)
        assert (changed.value.job_id, changed.value.webhook) == (hooked, HOOK)
        # Without a webhook asked for, the reuse stands; the job keeps its own.
        assert await runner.submit("alice", "user", urls("x"), metadata=labels) == (hooked, True)
        # Nothing was created by the refused resubmits.
        jobs = await job_store.list_jobs(now=clock(), caller="alice")
        assert sorted(job.id for job in jobs) == sorted([plain, hooked])
        delivery = await runner.delivery(hooked)
        assert delivery is not None and delivery.url == HOOK


async def test_a_retry_made_again_with_another_webhook_raises(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(job_store, fetch, CONFIG, now=clock, webhooks=Receivers()) as runner:
        parent, _ = await runner.submit("alice", "user", urls("a", "b/fail"), webhook=HOOK)
        await runner.wait(parent)
        found = await runner.retry(parent, webhook=OTHER)
        assert found is not None and not found[1]
        assert await runner.retry(parent, webhook=OTHER) == (found[0], True)
        with pytest.raises(WebhookConflict) as conflict:
            await runner.retry(parent)  # the parent's webhook, which the retry has not
        assert (conflict.value.job_id, conflict.value.webhook) == (found[0], OTHER)
        with pytest.raises(WebhookConflict):
            await runner.retry(parent, webhook=HOOK)
        assert await runner.retry(parent, webhook=None) == (found[0], True)  # none asked for
