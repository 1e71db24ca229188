"""The fetch function's ``check_target`` hook: bad targets refused at submit, nothing stored."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trio_batch import Config, InvalidTargets, Options, Result, Store, Target, open_runner
from trio_batch.fetchers import HttpFetcher

from ..support.fakes import FakeClock, ScriptedFetch

CONFIG = Config(ttl=100, targets_per_job=8, jobs_per_caller=2, jobs_total=4)


class Refused(Exception):
    """What an embedding program's own check raises."""

    def __init__(self, message: str, *, option: str, hint: str) -> None:
        super().__init__(message)
        self.option = option
        self.hint = hint


@dataclass
class CheckedFetch(ScriptedFetch):
    """A scripted fetch function with its own submit-time check: ``mode: shout`` only."""

    checked: list[str] = field(default_factory=list)

    def check_target(self, target: Target) -> None:
        self.checked.append(target.url)
        if target.options.mode not in ("", "shout"):
            raise Refused(
                f"mode {target.options.mode!r} is unknown", option="mode", hint="use 'shout'"
            )


async def test_an_embedding_programs_check_refuses_a_target_before_anything_is_stored(
    store: Store, clock: FakeClock
) -> None:
    fetch = CheckedFetch()
    targets = [Target("https://x.test/a"), Target("https://x.test/b", Options(mode="whisper"))]
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        with pytest.raises(InvalidTargets) as info:
            await runner.submit("alice", "user", targets)
        job_id, _ = await runner.submit("alice", "user", [Target("https://x.test/a")])
        await runner.wait(job_id)
    assert info.value.index == 1
    assert info.value.option == "mode"
    assert info.value.hint == "use 'shout'"
    assert "target 1 (https://x.test/b)" in str(info.value)
    assert "'whisper' is unknown" in str(info.value)
    assert fetch.checked == ["https://x.test/a", "https://x.test/b", "https://x.test/a"]
    assert fetch.calls == ["https://x.test/a"]  # only the accepted job was fetched
    assert [job.id for job in store.list_jobs(now=clock())] == [job_id]


async def test_a_plain_function_with_a_check_attribute_is_checked(
    store: Store, clock: FakeClock
) -> None:
    async def fetch(target: Target) -> Result:
        return Result("fetched")

    def check(target: Target) -> None:
        raise ValueError("no")

    fetch.check_target = check  # type: ignore[attr-defined]
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        with pytest.raises(InvalidTargets) as info:
            await runner.submit("alice", "user", [Target("https://x.test/a")])
    assert str(info.value) == "target 0 (https://x.test/a): no"
    assert info.value.option is None and info.value.hint is None
    assert store.count_live_jobs() == 0 and store.list_jobs(now=clock()) == []


class HostileError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    @property
    def hint(self) -> str:
        raise RuntimeError("no hint either")


@dataclass
class HostileCheck(ScriptedFetch):
    def check_target(self, target: Target) -> None:
        raise HostileError


async def test_a_misbehaving_check_fails_the_submit_not_the_runner(
    store: Store, clock: FakeClock
) -> None:
    async with open_runner(store, HostileCheck(), CONFIG, now=clock) as runner:
        with pytest.raises(InvalidTargets) as info:
            await runner.submit("alice", "user", [Target("https://x.test/a")])
        assert "unprintable HostileError" in str(info.value)
        assert info.value.hint is None
        # The runner still serves.
        assert await runner.status("A" * 22) is None
    assert store.list_jobs(now=clock()) == []


@dataclass
class InterruptedCheck(ScriptedFetch):
    def check_target(self, target: Target) -> None:
        raise KeyboardInterrupt


async def test_a_keyboard_interrupt_in_the_check_is_not_turned_into_a_refusal(
    store: Store, clock: FakeClock
) -> None:
    with pytest.raises(KeyboardInterrupt):
        async with open_runner(store, InterruptedCheck(), CONFIG, now=clock) as runner:
            await runner.submit("alice", "user", [Target("https://x.test/a")])
    assert store.list_jobs(now=clock()) == []


async def test_the_http_fetcher_refuses_bad_options_at_submit(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    page = tmp_path / "page.txt"
    page.write_text("hello\n")
    fetcher = HttpFetcher()
    async with open_runner(store, fetcher, CONFIG, now=clock) as runner:
        for options, option in [
            (Options(grep="("), "grep"),
            (Options(jq=".[ "), "jq"),
            (Options(pages="0"), "pages"),
            (Options(pages="3-1"), "pages"),
            (Options(mode="pdf"), "mode"),
        ]:
            with pytest.raises(InvalidTargets) as info:
                await runner.submit("alice", "user", [Target(page.as_uri(), options)])
            assert info.value.option == option, options
            assert info.value.hint, options
        job_id, _ = await runner.submit("alice", "user", [Target(page.as_uri(), Options(grep="h"))])
        job = await runner.wait(job_id)
    assert job is not None and job.targets_done == 1 and job.targets_failed == 0
    assert [j.id for j in store.list_jobs(now=clock())] == [job_id]
