"""A submit whose create the PostgreSQL server committed, but whose answer was lost with its
connection: the caller gets :class:`StoreUnavailable`, its retry finds the job (a reuse), and
the job is still drained to the end by the runner that created it.

The loss is real: a TCP proxy (``cuttable_proxy.py``) delays every chunk, and its connections
are cut once the job is seen committed from another connection, before the answer comes back.
"""

from __future__ import annotations

import time

import pytest
import trio

from trio_batch import Config, StoreUnavailable, open_runner, open_store

from ..support.cuttable_proxy import CuttableProxy
from ..support.fakes import ScriptedFetch, urls
from ..support.pg_server import through
from .test_postgres_cluster import DEADLINE, _job, _outcomes, _sql

#: Seconds each chunk through the proxy waits during the create: the time the test has to see
#: the commit and cut before the answer arrives (it polls every few milliseconds).
DELAY = 1.0


def _committed(dsn: str, caller: str) -> str:
    """The id of ``caller``'s job once it is committed (seen from another connection)."""
    deadline = time.monotonic() + DEADLINE
    while not (rows := _sql(dsn, "SELECT id FROM jobs WHERE caller = %s", (caller,))):
        assert time.monotonic() < deadline, "timed out waiting for the create to commit"
        time.sleep(0.005)
    return str(rows[0][0])


async def test_a_create_committed_but_lost_with_its_connection_is_drained_after_the_retry(
    pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    targets = urls("a", "b", "c")
    config = Config(poll_interval=0.05)
    async with (
        open_store(through(pg_proxy, pg_dsn)) as store,
        open_runner(store, ScriptedFetch(), config) as runner,
    ):
        committed: list[str] = []

        async def cut_once_committed() -> None:
            committed.append(await trio.to_thread.run_sync(_committed, pg_dsn, "alice"))
            pg_proxy.cut()  # the answer is still in the proxy: the client's connection drops
            pg_proxy.latency = 0.0

        async with trio.open_nursery() as nursery:
            pg_proxy.latency = DELAY
            nursery.start_soon(cut_once_committed)
            with pytest.raises(StoreUnavailable):
                await runner.submit("alice", "user", targets)
        assert _job(pg_dsn, committed[0])[0] == "running"  # committed, and never drained
        job_id, reused = await runner.submit("alice", "user", targets)
        assert (job_id, reused) == (committed[0], True)
        with trio.fail_after(DEADLINE):  # a bound on a hang, not a speed check
            job = await runner.wait(job_id)
        assert job is not None and job.status == "done"
    assert _job(pg_dsn, job_id) == ("done", None, len(targets))
    assert [o[1] for o in _outcomes(pg_dsn, job_id)] == ["done"] * len(targets)
