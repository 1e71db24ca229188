"""Fault injection: whatever the fetch function or the database does, the runner stays up.

Each case runs a job with the fault beside a healthy job of another caller, then checks that
the faulty target holds a clear stored error (or that the call failed with a typed error), that
the healthy job finished untouched, and that the runner still takes new work. The table of
cases is printed at the end; a case that failed shows as FAILED in it.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_batch import (
    Config,
    JobState,
    Result,
    Runner,
    Store,
    StoreUnavailable,
    Target,
    TargetState,
    open_runner,
)

from ..support.fakes import FakeClock, SetsOnMessage
from ..support.sqlite_locker import LOCKER


@dataclass
class Row:
    """One case of the printed table: FAILED until the case records how it went."""

    case: str
    outcome: str = "FAILED (see the test's report)"
    other: str = "-"
    served: bool = False
    passed: bool = False

    def record(self, outcome: str, other: str, *, served: bool) -> None:
        """The case passed: ``outcome`` was stored (or raised), the other job ended ``other``."""
        self.outcome, self.other, self.served, self.passed = outcome, other, served, True


ROWS: list[Row] = []


def table_row(case: str) -> Row:
    """Add ``case`` to the table; it shows as failed unless the case records its outcome."""
    row = Row(case)
    ROWS.append(row)
    return row


async def serves_new_work(runner: Runner) -> bool:
    """True if a fresh job of a fresh caller runs to ``done`` after the fault."""
    job_id, _ = await runner.submit("afterwards", "user", [Target("https://good.test/after")])
    job = await runner.wait(job_id)
    return job is not None and job.status == JobState.DONE


@pytest.fixture(scope="module", autouse=True)
def print_table(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else _nothing():
        width = max((len(row.case) for row in ROWS), default=10)
        failed = sum(not row.passed for row in ROWS)
        served = sum(row.served for row in ROWS)
        print(
            f"\n\nfault injection: {len(ROWS)} cases, {failed} failed; the runner ran a new "
            f"job to done after {served} of them"
        )
        print(f"  {'case':<{width}}  {'stored outcome / error':<58}  {'other job':<9}  after")
        for row in ROWS:
            short = row.outcome.replace(SHORTEN, "not JSON")
            after = "served" if row.served else "-"
            print(f"  {row.case:<{width}}  {short[:58]:<58}  {row.other:<9}  {after}")


SHORTEN = "the fetch returned a Result that cannot be stored as JSON"


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class HintedError(Exception):
    hint = "try again tomorrow"


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def raising(exc: BaseException) -> Callable[[], Awaitable[Any]]:
    async def fetch() -> Any:
        raise exc

    return fetch


def returning(value: object) -> Callable[[], Awaitable[Any]]:
    async def fetch() -> Any:
        return value

    return fetch


cyclic: dict[str, Any] = {}
cyclic["self"] = cyclic


@dataclass
class Case:
    name: str
    fetch: Callable[[], Awaitable[Any]]
    error_part: str | None  # None: the target is stored as done


FETCH_CASES = [
    Case("raises ValueError", raising(ValueError("bad value")), "ValueError: bad value"),
    Case("raises OSError", raising(OSError(5, "I/O")), "OSError: [Errno 5] I/O"),
    Case("raises KeyError", raising(KeyError("k")), "KeyError: 'k'"),
    Case("raises RuntimeError", raising(RuntimeError()), "RuntimeError"),
    Case("raises TimeoutError", raising(TimeoutError("slow")), "TimeoutError: slow"),
    Case("raises trio.TooSlowError", raising(trio.TooSlowError()), "TooSlowError"),
    Case("raises with a hint", raising(HintedError("nope")), "HintedError: nope"),
    Case("raises, str() raises", raising(BadStr()), "BadStr: <unprintable BadStr>"),
    Case("raises a huge message", raising(ValueError("x" * 100_000)), "ValueError: xxx"),
    Case(
        "raises ExceptionGroup",
        raising(ExceptionGroup("eg", [ValueError("a"), KeyError("b")])),
        "ExceptionGroup: eg (2 sub-exceptions)",
    ),
    Case("returns None", returning(None), "returned NoneType, not a Result"),
    Case("returns a dict", returning({"content": "x"}), "returned dict, not a Result"),
    Case("returns a str", returning("text"), "returned str, not a Result"),
    Case("meta holds a set", returning(Result("c", {"s": {1}})), "cannot be stored as JSON"),
    Case("meta holds NaN", returning(Result("c", {"n": math.nan})), "cannot be stored as JSON"),
    Case("meta holds inf", returning(Result("c", {"n": math.inf})), "cannot be stored as JSON"),
    Case(
        "meta holds a 10k-digit int",
        returning(Result("c", {"n": 10**10_000})),
        "cannot be stored as JSON",
    ),
    Case("meta is a cycle", returning(Result("c", cyclic)), "cannot be stored as JSON"),
    Case("meta is a list", returning(Result("c", [1])), "meta must be a dict"),  # type: ignore[arg-type]
    Case("content is bytes", returning(Result(b"c")), "content must be a str"),  # type: ignore[arg-type]
    Case("content has a lone surrogate", returning(Result("\udc80")), "cannot be stored"),
    Case("10 MB content", returning(Result("x" * 10_000_000)), None),
]


async def run_with_neighbour(
    runner: Runner, targets: list[Target]
) -> tuple[tuple[Any, list[Any]], JobState]:
    """Run ``targets`` for one caller beside a healthy job of another; return both outcomes."""
    job_id, _ = await runner.submit("faulty", "user", targets)
    other_id, _ = await runner.submit(
        "healthy", "user", [Target(f"https://ok.test/{i}") for i in range(3)]
    )
    job = await runner.wait(job_id)
    other = await runner.wait(other_id)
    assert job is not None and other is not None
    status = await runner.status(job_id)
    assert status is not None
    return status, other.status


@pytest.mark.parametrize("case", FETCH_CASES, ids=[c.name for c in FETCH_CASES])
async def test_a_misbehaving_fetch_fails_only_its_target(case: Case, clock: FakeClock) -> None:
    row = table_row(case.name)
    store = Store.open()

    async def fetch(target: Target) -> Result:
        if target.url.startswith("https://bad.test/"):
            return await case.fetch()  # type: ignore[no-any-return]
        return Result(f"fine {target.url}")

    async with open_runner(store, fetch, now=clock) as runner:
        (job, targets), other = await run_with_neighbour(
            runner, [Target("https://bad.test/x"), Target("https://good.test/y")]
        )
        served = await serves_new_work(runner)
    assert served
    bad, good = targets
    assert other == JobState.DONE
    assert good.status == TargetState.DONE
    if case.error_part is None:
        assert bad.status == TargetState.DONE
        assert bad.result == await case.fetch()
        outcome = f"done ({len(bad.result.content):,} chars)"
    else:
        assert bad.status == TargetState.FAILED
        assert bad.error is not None and case.error_part in bad.error
        assert len(bad.error) <= 4096
        outcome = bad.error
    assert job.status == (JobState.DONE if case.error_part is None else JobState.PARTIAL)
    assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    row.record(outcome, other, served=served)


async def test_a_hint_on_the_exception_is_stored(clock: FakeClock) -> None:
    async def fetch(target: Target) -> Result:
        raise HintedError("nope")

    async with open_runner(Store.open(), fetch, now=clock) as runner:
        job_id, _ = await runner.submit("a", "user", [Target("https://bad.test/")])
        await runner.wait(job_id)
        status = await runner.status(job_id)
    assert status is not None and status[1][0].hint == "try again tomorrow"


async def test_a_hung_fetch_times_out(
    clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    row = table_row("hangs (target_timeout=30)")

    async def fetch(target: Target) -> Result:
        if "bad" in target.url:
            await trio.sleep_forever()
        return Result("fine")

    async with open_runner(Store.open(), fetch, Config(target_timeout=30), now=clock) as runner:
        (_, targets), other = await run_with_neighbour(
            runner, [Target("https://bad.test/"), Target("https://good.test/")]
        )
        served = await serves_new_work(runner)
    assert (targets[0].status, targets[0].error) == (TargetState.FAILED, "timeout")
    assert other == JobState.DONE
    assert served
    row.record("timeout", other, served=served)


async def test_a_fetch_hung_through_a_cancel_is_cut_after_the_grace(
    clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    row = table_row("hangs through a cancel (grace=5)")
    hanging = trio.Event()

    async def fetch(target: Target) -> Result:
        if "bad" in target.url:
            hanging.set()
            with trio.CancelScope(shield=False):
                await trio.sleep_forever()
        return Result("fine")

    async with open_runner(Store.open(), fetch, Config(cancel_grace=5), now=clock) as runner:
        job_id, _ = await runner.submit(
            "faulty", "user", [Target("https://bad.test/"), Target("https://good.test/")]
        )
        await hanging.wait()
        assert await runner.cancel(job_id)
        job = await runner.wait(job_id)
        status = await runner.status(job_id)
        served = await serves_new_work(runner)
    assert job is not None and job.status == JobState.CANCELLED
    assert status is not None
    assert [(t.status, t.error) for t in status[1]] == [
        (TargetState.FAILED, "cancelled"),
        (TargetState.PENDING, None),
    ]
    assert served
    row.record("cancelled", "-", served=served)


# ---------------------------------------------------------------------------------------------
# The database misbehaves


async def test_a_database_locked_by_another_process(tmp_path: Path) -> None:
    """Submit fails clearly while the lock is held; an outcome write waits it out, then lands."""
    row = table_row("database locked by another process")
    path = tmp_path / "jobs.db"
    store = Store.open(path, busy_timeout=0.1)
    release_fetch = trio.Event()
    refused = trio.Event()  # set when the runner logs that the database refused the write
    logger = logging.getLogger("trio_batch.test_fault_injection")
    logger.addHandler(SetsOnMessage("could not store an outcome; retrying", refused))

    async def fetch(target: Target) -> Result:
        await release_fetch.wait()
        return Result("fine")

    config = Config(store_retry_for=60)
    async with open_runner(store, fetch, config, logger=logger) as runner:
        job_id, _ = await runner.submit("alice", "user", [Target("https://a.test/")])
        locker = await trio.lowlevel.open_process(
            [sys.executable, "-c", LOCKER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            assert locker.stdout is not None and locker.stdin is not None
            assert (await locker.stdout.receive_some()).strip() == b"locked"
            with pytest.raises(StoreUnavailable, match="held the database lock") as info:
                await runner.submit("bob", "user", [Target("https://b.test/")])
            release_fetch.set()  # the outcome write now meets the lock and retries
            await refused.wait()
            retrying = await runner.status(job_id)  # reads are not held up by the lock
            assert retrying is not None
            assert retrying[0].status == JobState.RUNNING  # still retrying, not failed
            assert retrying[1][0].status == TargetState.RUNNING
            await locker.stdin.send_all(b"\n")
        finally:
            with trio.CancelScope(shield=True):
                await locker.wait()
        job = await runner.wait(job_id)
        assert job is not None and job.status == JobState.DONE
        # And the runner serves new work once the lock is gone.
        other, _ = await runner.submit("bob", "user", [Target("https://b.test/")])
        other_job = await runner.wait(other)
        assert other_job is not None and other_job.status == JobState.DONE
        served = await serves_new_work(runner)
    assert served
    row.record(str(info.value), other_job.status, served=served)


async def test_a_full_disk_fails_the_job_clearly_and_recovers(
    clock: FakeClock, autojump_clock: trio.testing.MockClock
) -> None:
    row = table_row("disk full (max_page_count)")
    store = Store.open()
    big = "x" * 200_000

    async def fetch(target: Target) -> Result:
        return Result(big if "big" in target.url else "small")

    config = Config(store_retry_for=5, jobs_per_caller=5)
    async with open_runner(store, fetch, config, now=clock) as runner:
        pages = store.db.execute("PRAGMA page_count").fetchone()[0]
        store.db.execute(f"PRAGMA max_page_count = {pages + 5}")
        job_id, _ = await runner.submit(
            "alice", "user", [Target("https://a.test/big"), Target("https://a.test/small")]
        )
        job = await runner.wait(job_id)
        assert job is not None
        status = await runner.status(job_id)
        assert status is not None
        assert job.status == JobState.FAILED
        assert job.error is not None and "the disk or the database is full" in job.error
        assert "target 0" in job.error
        assert [t.status for t in status[1]] == [TargetState.PENDING, TargetState.PENDING]
        # Room again: the runner goes on.
        store.db.execute("PRAGMA max_page_count = 1000000")
        other, _ = await runner.submit("alice", "user", [Target("https://a.test/small")])
        other_job = await runner.wait(other)
        assert other_job is not None and other_job.status == JobState.DONE
        served = await serves_new_work(runner)
    assert served
    row.record(job.error, other_job.status, served=served)


async def test_submit_on_a_full_disk_raises_a_clear_error(clock: FakeClock) -> None:
    row = table_row("submit on a full disk")
    store = Store.open()

    async def fetch(target: Target) -> Result:
        return Result("x")

    async with open_runner(store, fetch, now=clock) as runner:
        pages = store.db.execute("PRAGMA page_count").fetchone()[0]
        store.db.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreUnavailable, match="the disk or the database is full") as info:
            await runner.submit(
                "alice", "user", [Target(f"https://a.test/{'x' * 5000}{i}") for i in range(30)]
            )
        assert store.count_live_jobs() == 0  # nothing half-created
        store.db.execute("PRAGMA max_page_count = 1000000")
        served = await serves_new_work(runner)
    assert served
    row.record(str(info.value), "-", served=served)


async def test_transient_io_errors_are_retried(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Real trio time (the three waits add up to 0.35 s): an autojump clock leaps to the next
    # timer (the purge, 300 s on) whenever the loop idles while a store call runs on the
    # thread, which spent the 30 s of store_retry_for in one leap and failed the job.
    row = table_row("3 transient I/O errors on a write")
    failures = iter([True, True, True])
    real = Store._write_outcome

    def flaky(self: Store, *args: Any) -> Any:
        if next(failures, False):
            raise sqlite3.OperationalError("disk I/O error")
        return real(self, *args)

    # Every outcome write, alone or in a shared commit, runs this.
    monkeypatch.setattr(Store, "_write_outcome", flaky)

    async def fetch(target: Target) -> Result:
        return Result("x")

    async with open_runner(Store.open(), fetch, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", [Target("https://a.test/")])
        job = await runner.wait(job_id)
        served = await serves_new_work(runner)
    assert job is not None and job.status == JobState.DONE
    assert next(failures, "used up") == "used up"  # all three errors were met
    assert served
    row.record("done after retries", "-", served=served)
