"""A watcher reads a job's outcomes in pages bounded by their results' size, not only by a
count: with 10 MB results a page of 256 outcomes held 2.5 GB. A page cut short by size is
read on at once, so every outcome still comes, in order."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import trio_batch.runner._waits
from trio_batch import Config, Job, JobState, JobStore, Result, Target, TargetStatus, open_runner

from ..support.fakes import FakeClock, ScriptedFetch

#: The page bound the tests set: three of the results below fit under it, a fourth does not.
BOUND = 10_000
CONTENT = 4_000
TARGETS = 12


def _big_results(fetch: ScriptedFetch) -> list[Target]:
    targets = [Target(f"https://example.test/{i}") for i in range(TARGETS)]
    for i, t in enumerate(targets):
        fetch.custom[t.url] = lambda i=i: Result(chr(97 + i) * CONTENT, {"i": i})
    return targets


def _record_pages(job_store: JobStore, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Each page the store returns to a watcher, as its results' sizes (characters of JSON)."""
    pages: list[list[int]] = []
    real = job_store.get_outcomes

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        found = await real(*args, **kwargs)
        if found is not None:
            sizes = [0 if t.result is None else len(t.result.to_json_text()) for t in found[1]]
            pages.append(sizes)
        return found

    monkeypatch.setattr(job_store, "get_outcomes", recorded)
    monkeypatch.setattr(trio_batch.runner._waits, "WATCH_PAGE_BYTES", BOUND)
    return pages


def _check(items: list[TargetStatus | Job], pages: list[list[int]]) -> None:
    assert [getattr(i, "idx", None) for i in items] == [*range(TARGETS), None]
    for i, item in enumerate(items[:-1]):
        assert isinstance(item, TargetStatus) and item.result is not None
        assert item.result.content == chr(97 + i) * CONTENT
    assert isinstance(items[-1], Job) and items[-1].status == JobState.DONE
    # No page holds more than the bound before its last result (the one that takes it past).
    assert all(sum(sizes[:-1]) < BOUND for sizes in pages), pages
    assert sum(len(sizes) for sizes in pages) == TARGETS  # and each outcome is read once


async def test_a_finished_job_is_watched_in_pages_bounded_by_size(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets = _big_results(fetch)
    config = Config(ttl=100, targets_per_job=TARGETS)
    async with open_runner(job_store, fetch, config, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        assert (await runner.wait(job_id)) is not None
        pages = _record_pages(job_store, monkeypatch)
        items = [item async for item in runner.watch(job_id)]
    _check(items, pages)
    # Every outcome was stored before the watch: four pages of three, each cut by size.
    assert [len(sizes) for sizes in pages] == [3, 3, 3, 3]


async def test_a_live_job_is_watched_in_pages_bounded_by_size(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets = _big_results(fetch)
    started, release = fetch.gate(targets[7].url)
    config = Config(ttl=100, targets_per_job=TARGETS)
    async with open_runner(job_store, fetch, config, now=clock) as runner:
        pages = _record_pages(job_store, monkeypatch)
        job_id, _ = await runner.submit("alice", "user", targets)
        await started.wait()  # seven outcomes stored, the eighth held back
        items: list[TargetStatus | Job] = []
        async for item in runner.watch(job_id):
            items.append(item)
            if getattr(item, "idx", None) == 6:
                release.set()
    _check(items, pages)
    assert [len(sizes) for sizes in pages][:3] == [3, 3, 1]  # what was stored, by size


async def test_a_cancelled_watch_reads_no_further_page(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its pages are store reads, which run to completion and never raise Cancelled: a reader
    # that awaits nothing else read every page of a finished job, a cancel notwithstanding.
    targets = _big_results(fetch)
    config = Config(ttl=100, targets_per_job=TARGETS)
    async with open_runner(job_store, fetch, config, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", targets)
        assert (await runner.wait(job_id)) is not None
        pages = _record_pages(job_store, monkeypatch)
        items: list[TargetStatus | Job] = []
        with trio.CancelScope() as scope:
            async for item in runner.watch(job_id):
                items.append(item)  # no checkpoint of its own
                scope.cancel()  # the first page is read: cancel now
        assert scope.cancelled_caught
    assert len(pages) == 1  # no further page was read
    assert [getattr(i, "idx", None) for i in items] == [0, 1, 2]  # the page in hand is yielded
