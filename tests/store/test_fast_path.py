"""The SQLite fast path (the loop thread's own connection) keeps costly work off the loop, and
a Ctrl-C caught on it leaves no transaction open.

What the loop thread does itself is kept small: a big meta is written, and big results are
decoded, on the store thread. Where a store call must be watched, a wrapped ``Store`` method
records which thread ran it.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_batch.store._rows
from trio_batch import Config, JobState, Result, SQLiteJobStore, Store, open_runner
from trio_batch.store import NewJob
from trio_batch.store.sqlite._fast_path import FAST_MAX_CONTENT, FAST_MAX_RESULTS

from ..support.fakes import FakeClock, ScriptedFetch, on_loop_thread, urls

CONFIG = Config(ttl=100, targets_per_job=100, jobs_per_caller=1, jobs_total=3)


# ---------------------------------------------------------------------------------------------
# Found in review: a big meta was serialised and written on the event loop (only the content
# was measured).


async def test_a_big_meta_is_not_written_on_the_event_loop(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_loop: list[bool] = []
    real_record = Store.record_outcomes

    def record_outcomes(self: Store, *args: Any, **kwargs: Any) -> Any:
        on_loop.append(on_loop_thread())
        return real_record(self, *args, **kwargs)

    monkeypatch.setattr(Store, "record_outcomes", record_outcomes)
    url = "https://example.test/bigmeta"
    fetch.custom[url] = lambda: Result("small", {"blob": "y" * (16 * FAST_MAX_CONTENT)})
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", urls("bigmeta"))
        job = await runner.wait(job_id)
    assert job is not None and job.status == JobState.DONE
    assert on_loop == [False]


# ---------------------------------------------------------------------------------------------
# Status reads decode results when first read; a read sent to the store thread because the
# job's results are big must hand them back decoded, or the loop would decode them.


async def test_big_results_are_decoded_on_the_store_thread_small_ones_when_read(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded_on_loop: list[bool] = []
    real_decode = trio_batch.store._rows._decode_result

    def decode(text: str) -> Result:
        decoded_on_loop.append(on_loop_thread())
        return real_decode(text)

    monkeypatch.setattr(trio_batch.store._rows, "_decode_result", decode)
    fetch.custom["https://example.test/big"] = lambda: Result("z" * (FAST_MAX_RESULTS + 1))
    async with open_runner(store, fetch, CONFIG, now=clock) as runner:
        big_id, _ = await runner.submit("alice", "user", urls("big"))
        small_id, _ = await runner.submit("bob", "user", urls("small"))
        await runner.wait(big_id)
        await runner.wait(small_id)
        big = await runner.status(big_id)
        assert decoded_on_loop == [False]  # on the store thread, during the read
        assert big is not None and big[1][0].result == Result("z" * (FAST_MAX_RESULTS + 1))
        small = await runner.status(small_id)
        assert decoded_on_loop == [False]  # nothing more: the big one was decoded already
        assert small is not None and small[1][0].result is not None
        assert decoded_on_loop == [False, True]  # when read, on the loop: it is small
        assert small[1][0].result is not None
        assert decoded_on_loop == [False, True]  # once


# ---------------------------------------------------------------------------------------------
# Found in review: Ctrl-C on the loop thread's fast path. Trio raises KeyboardInterrupt wherever
# unprotected code runs; caught between BEGIN and the block that commits or rolls back, it left
# the connection inside a transaction with its lock released, and every later write on that
# connection went into a savepoint of it: never committed.


class _CtrlCAfter:
    """A sqlite3 connection that gets a Ctrl-C as ``statement`` returns: it calls the SIGINT
    handler in force (trio's, inside ``trio.run``) with the current frame, which is what the
    interpreter does with a real SIGINT at that point, without a signal that could reach the
    test process itself should trio's handler not be in place."""

    def __init__(self, conn: Any, statement: str) -> None:
        self._conn = conn
        self._statement = statement
        self.fired = False

    def execute(self, sql: str, *args: Any) -> Any:
        cursor = self._conn.execute(sql, *args)
        if sql == self._statement and not self.fired:
            self.fired = True
            handler = signal.getsignal(signal.SIGINT)
            assert callable(handler) and handler is not signal.default_int_handler  # trio's
            handler(signal.SIGINT, sys._getframe())
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.parametrize(
    ("statement", "call"),
    [
        ("BEGIN IMMEDIATE", "create_job"),  # a write transaction
        ("BEGIN", "get_status"),  # a read snapshot
    ],
)
def test_ctrl_c_during_a_fast_path_call_leaves_no_transaction_open(
    tmp_path: Path, statement: str, call: str
) -> None:
    store = Store.open(tmp_path / "jobs.db")
    job_store = SQLiteJobStore(store)
    existing, _ = store.create_job(
        NewJob(
            "bob", "user", urls("b"), ttl=100, targets_per_job=10, jobs_per_caller=5, jobs_total=5
        )
    )

    async def main() -> None:
        job_store._start()
        fast = job_store._fast
        assert fast is not None and fast is not store  # the loop's own connection
        fast.db.conn = _CtrlCAfter(fast.db.conn, statement)  # type: ignore[assignment]
        if call == "create_job":
            await job_store.create_job(
                NewJob(
                    "alice",
                    "user",
                    urls("a"),
                    ttl=100,
                    targets_per_job=10,
                    jobs_per_caller=5,
                    jobs_total=5,
                ),
                now=time.time(),
            )
        else:
            await job_store.get_status(existing.id, now=time.time())
        await trio.sleep_forever()  # a Ctrl-C held back until a checkpoint arrives here

    # trio catches Ctrl-C only where Python's default handler is in place; a process started
    # with SIGINT ignored (as a background job may be) has none, so install it for the test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            trio.run(main)
        fast = job_store._fast
        assert fast is not None
        proxy = fast.db.conn
        assert isinstance(proxy, _CtrlCAfter) and proxy.fired
        assert not proxy.in_transaction, "a transaction was left open"
        # The connection goes on committing what it writes.
        job, _ = fast.create_job(
            NewJob(
                "carol",
                "user",
                urls("c"),
                ttl=100,
                targets_per_job=10,
                jobs_per_caller=5,
                jobs_total=5,
            )
        )
        assert store.get_job(job.id) is not None, "a later write was never committed"
    finally:
        signal.signal(signal.SIGINT, previous)
        job_store._thread.stop()
        if job_store._fast is not None:
            job_store._fast.close()
        store.close()
