"""One cap on a stored result's size for every fetch function: Config.max_result_size
(issue 26: a custom fetch's 50 MB result was stored and served whole)."""

from __future__ import annotations

import pytest

from trio_batch import Config, JobState, Result, Store, TargetState, open_runner

from ..support.fakes import FakeClock, ScriptedFetch, urls


async def test_a_custom_fetchs_oversized_result_fails_its_target_and_the_job_goes_on(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    targets = urls("big", "small")
    fetch.custom[targets[0].url] = lambda: Result("x" * 5000)
    config = Config(ttl=100, max_result_size=1000)
    async with open_runner(store, fetch, config, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        job = await runner.wait(job_id)
        found = await runner.status(job_id)
    assert job is not None and job.status == JobState.PARTIAL
    assert found is not None
    big, small = found[1]
    assert big.status == TargetState.FAILED and big.result is None
    assert big.error is not None and big.error.startswith("ResultTooLarge: the result is 5")
    assert small.status == TargetState.DONE


def test_the_cap_has_a_default_and_is_checked() -> None:
    assert Config().max_result_size == 16 * 1024 * 1024
    assert Config(max_result_size=0).max_result_size == 16 * 1024 * 1024
    with pytest.raises(ValueError):
        Config(max_result_size=-1)
    with pytest.raises(TypeError):
        Config(max_result_size=1.5)  # type: ignore[arg-type]
