"""Network faults between one runner and the database: a TCP proxy on 127.0.0.1 that holds
all traffic (a partition: the kernel still acknowledges what is sent, so only the runner's own
bounds notice), or adds latency.

Runner A reaches the database through the proxy, runner B directly. A partition longer than
``runner_timeout`` gets A's job reaped by B, and A's late writes refused; a shorter one, and
50 ms each way, are ridden out with no false reap. A status call on A during the partition
fails within ``store_timeout``. Durations are printed as figures, never asserted.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..support.cuttable_proxy import CuttableProxy
from ..support.figures import Figures
from ..support.pg_server import through
from . import test_postgres_cluster as cluster
from .test_postgres_cluster import Child, _job, _outcomes, _until, _urls

spawn = cluster.spawn


def _stored(dsn: str, job_id: str) -> list[tuple[object, ...]]:
    return [o for o in _outcomes(dsn, job_id) if o[1] != "pending"]


def test_a_partition_past_runner_timeout_gets_the_job_reaped_and_late_writes_refused(
    spawn: Callable[..., Child], pg_dsn: str, pg_proxy: CuttableProxy, figures: Figures
) -> None:
    store_timeout = 1.0
    a = spawn(through(pg_proxy, pg_dsn), store_timeout=store_timeout)
    spawn()  # B, direct: the reaper
    job_id = a.call("submit", caller="alice", urls=_urls("p", *["sleep-0.1"] * 30))["job"]
    _until(lambda: _job(pg_dsn, job_id)[2] >= 2, "two of A's targets to be stored")
    pg_proxy.hold()
    held = time.monotonic()
    status = a.call("status_timed", job=job_id)
    assert status["error"] == "StoreUnavailable" and "store_timeout" in status["message"]
    _until(lambda: _job(pg_dsn, job_id)[0] != "running", "A's job to be reaped by B")
    reaped_after = time.monotonic() - held
    assert _job(pg_dsn, job_id)[:2] == ("failed", "restart")
    at_reap = _stored(pg_dsn, job_id)
    pg_proxy.release()
    # A comes back: what it still had to write into the reaped job is refused.
    # Whichever learns of the reap first says so: the poll, or the drain's refused write.
    a.wait_log(
        (
            "job reaped by another runner; drain stopped",
            "outcome refused: the job lapsed or is no longer this runner's; drain stopped",
        ),
        job_id,
    )
    assert _stored(pg_dsn, job_id) == at_reap
    assert _job(pg_dsn, job_id)[:2] == ("failed", "restart")
    # Stored in target order, each after the one before it finished.
    finished = [o[4] for o in at_reap]
    assert finished == sorted(finished)
    figures.add(
        f"postgres partition of one runner: its status call failed after "
        f"{status['seconds']:.2f} s (store_timeout {store_timeout:g} s); the other reaped its "
        f"job {reaped_after:.2f} s after the partition began "
        f"(heartbeat_interval {cluster.HEARTBEAT:g} s, runner_timeout {cluster.RUNNER_TIMEOUT:g} s)"
    )


def test_a_short_partition_and_latency_are_ridden_out_with_no_false_reap(
    spawn: Callable[..., Child], pg_dsn: str, pg_proxy: CuttableProxy
) -> None:
    timing = {"heartbeat_interval": 0.5, "runner_timeout": 8.0, "store_timeout": 2.0}
    a = spawn(through(pg_proxy, pg_dsn), **timing)
    b = spawn(**timing)
    job_id = a.call("submit", caller="alice", urls=_urls("s", *["sleep-0.05"] * 30))["job"]
    _until(lambda: _job(pg_dsn, job_id)[2] >= 2, "two of A's targets to be stored")
    pg_proxy.hold()  # well under runner_timeout (and its fencing share)
    time.sleep(1.0)
    pg_proxy.release()
    pg_proxy.latency = 0.05  # each way, for the rest of the job
    finished = b.call("wait", job=job_id)
    assert (finished["status"], finished["done"], finished["error"]) == ("done", 30, None)
    assert [o[1] for o in _outcomes(pg_dsn, job_id)] == ["done"] * 30
    assert not any("reaped" in m["log"] for m in a.logs + b.logs)
