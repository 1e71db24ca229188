"""Runner processes on one PostgreSQL database through a real PgBouncer in transaction mode.

What a managed database's pooled URL gives: each transaction goes to whichever server
connection is free. Runners reach the database only through the pooler (a plain
``postgresql://`` URL to it, nothing else set): three runners one after another, then two at
once, with caps, reuse, a cancel and a wait across runners, and a SIGKILLed runner reaped.
Without a direct ``listen_url`` the runners hear no notifications through the pooler: they
say so once and work by their poll; with one, they hear them.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from ..support.figures import Figures
from ..support.pgbouncer import PgBouncer, log_size, not_linked
from . import test_postgres_cluster as cluster
from .test_postgres_cluster import Child, _job, _outcomes, _sql, _until, _urls

spawn = cluster.spawn

#: What a runner logs once when its LISTEN would go through the pooler.
DEAF = "LISTEN on "


def _no_pooler_errors(runner: Child) -> None:
    """No log line of the runner mentions a prepared statement or a failed store call."""
    bad = [m["log"] for m in runner.logs if "prepared statement" in m["log"]]
    bad += [m["log"] for m in runner.logs if m["log"].startswith("could not ")]
    assert bad == []


def _six_jobs(runner: Child, tag: str, dsn: str) -> None:
    """Six 12-target jobs from six callers at once; each done, every outcome stored once."""
    jobs = [
        runner.call("submit", caller=f"{tag}{k}", urls=_urls(f"{tag}{k}", *["sleep-0.01"] * 12))
        for k in range(6)
    ]
    assert not any(j["reused"] for j in jobs)
    for j in jobs:
        finished = runner.call("wait", job=j["job"])
        assert (finished["status"], finished["done"]) == ("done", 12)
        assert [o[1] for o in _outcomes(dsn, j["job"])] == ["done"] * 12


def test_three_runners_one_after_another_through_pgbouncer(
    spawn: Callable[..., Child], pooled_dsn: str, pg_dsn: str
) -> None:
    for turn in range(3):
        runner = spawn(pooled_dsn, jobs_total=8, jobs_per_caller=1)
        _six_jobs(runner, f"turn{turn}-", pg_dsn)
        # Reuse and the per-caller cap through the pooler.
        live = runner.call("submit", caller=f"cap{turn}", urls=_urls(f"cap{turn}", "hang"))
        again = runner.call("submit", caller=f"cap{turn}", urls=_urls(f"cap{turn}", "hang"))
        assert again == {"job": live["job"], "reused": True}
        busy = runner.answer(runner.send("submit", caller=f"cap{turn}", urls=_urls("x", "hang")))
        assert busy.get("error") == "CallerBusy"
        assert runner.call("cancel", job=live["job"]) is True
        _no_pooler_errors(runner)
        runner.stop()
        assert runner.proc.returncode == 0


def test_two_runners_at_once_through_pgbouncer(
    spawn: Callable[..., Child], pooled_dsn: str, pg_dsn: str, tmp_path: Path, figures: Figures
) -> None:
    a, b = spawn(pooled_dsn, jobs_total=4), spawn(pooled_dsn, jobs_total=4)
    # Reuse across runners: the same submit through both is one job.
    same = _urls("same", "hang")
    first = a.call("submit", caller="same", urls=same)
    assert b.call("submit", caller="same", urls=same) == {"job": first["job"], "reused": True}
    # The total cap (4) across both: three more from six callers.
    sent = [
        (r, r.send("submit", caller=f"c{i}", urls=_urls(f"c{i}", "hang")))
        for i, r in enumerate([a, b] * 3)
    ]
    answers = [r.answer(rid) for r, rid in sent]
    assert sorted(x.get("error", "ok") for x in answers) == ["Busy"] * 3 + ["ok"] * 3
    assert _sql(pg_dsn, "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')") == [(4,)]
    for x in [first, *(x["ok"] for x in answers if "ok" in x)]:
        assert b.call("cancel", job=x["job"]) is True
    # A cancel and a wait across runners, by the poll (no notifications through the pooler).
    job_id = a.call("submit", caller="alice", urls=_urls("x", "gate-g0", "gate-g1"))["job"]
    _until(lambda: (tmp_path / "g0.started").exists(), "target 0 to start")
    waiting = b.send("wait", job=job_id)
    assert b.call("cancel", job=job_id) is True
    a.wait_log("job cancelled through another runner", job_id)
    (tmp_path / "g0").touch()
    assert b.answer(waiting)["ok"]["status"] == "cancelled"
    assert [o[1] for o in _outcomes(pg_dsn, job_id)] == ["done", "pending"]
    # A SIGKILLed runner's job is reaped by the other, through the pooler.
    doomed = a.call("submit", caller="bob", urls=_urls("k", *["sleep-0.1"] * 30))["job"]
    _until(lambda: _job(pg_dsn, doomed)[2] >= 2, "two of A's targets to be stored")
    a.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    a.proc.wait()
    _until(lambda: _job(pg_dsn, doomed)[0] != "running", "A's job to be reaped")
    reaped_after = time.monotonic() - killed
    assert _job(pg_dsn, doomed)[:2] == ("failed", "restart")
    assert b.call("wait", job=doomed)["status"] == "failed"
    # Nothing went wrong through the pooler; LISTEN's trouble, if any, was said at most once.
    assert sum(m["log"].startswith(DEAF) for m in b.logs) <= 1
    _no_pooler_errors(b)
    figures.add(
        f"pgbouncer (transaction mode): reap after SIGKILL {reaped_after:.2f} s "
        f"(heartbeat_interval {cluster.HEARTBEAT:g} s, runner_timeout {cluster.RUNNER_TIMEOUT:g} s)"
    )


def test_a_runner_behind_pgbouncer_sends_no_listen_and_says_so_once(
    spawn: Callable[..., Child], pooled_dsn: str, pgbouncer: PgBouncer
) -> None:
    since = log_size(pgbouncer)
    runner = spawn(pooled_dsn)  # LISTEN on its store's URL: the pooler's
    _until(lambda: any(m["log"].startswith(DEAF) for m in runner.logs), "the warning")
    (said,) = [m["log"] for m in runner.logs if m["log"].startswith(DEAF)]
    assert "listen_url" in said and "--listen-db" in said
    # It carries on, by its poll; its probes and its jobs' notifications reach no LISTEN
    # left on a pooled server connection (PgBouncer would log each as "not linked").
    for k in range(3):
        job = runner.call("submit", caller="alice", urls=_urls(f"d{k}", "sleep-0"))
        assert runner.call("wait", job=job["job"])["status"] == "done"
    runner.stop()
    assert runner.proc.returncode == 0
    assert not_linked(pgbouncer, since) == []


def test_with_a_direct_listen_url_runners_behind_pgbouncer_hear_each_other(
    spawn: Callable[..., Child], pooled_dsn: str, pg_dsn: str, tmp_path: Path
) -> None:
    never = 2 * cluster.DEADLINE  # no poll in time: whatever is seen came by notification
    a = spawn(pooled_dsn, listen_url=pg_dsn, poll_interval=never)
    b = spawn(pooled_dsn, listen_url=pg_dsn, poll_interval=never)
    job_id = a.call("submit", caller="alice", urls=_urls("l", "gate-g0", "gate-g1"))["job"]
    _until(lambda: (tmp_path / "g0.started").exists(), "target 0 to start")
    waiting = b.send("wait", job=job_id)
    assert b.call("cancel", job=job_id) is True
    a.wait_log("job cancelled through another runner", job_id)
    (tmp_path / "g0").touch()
    assert b.answer(waiting)["ok"]["status"] == "cancelled"
    assert not any(m["log"].startswith(DEAF) for m in a.logs + b.logs)
