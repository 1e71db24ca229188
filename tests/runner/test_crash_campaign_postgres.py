"""Crash campaign on PostgreSQL: two busy runners on one database, SIGKILLed at random moments.

The same child as the SQLite campaign (``crash_child.py``, given a ``postgresql://`` URL: short
heartbeats) and the same invariants (``test_crash_campaign.check_rows``), checked against the
children's side logs after every round, on one database that accumulates every round's history.
Each round starts two runners that share the callers (so the per-caller cap is cluster-wide),
kills one and then the other at random moments, waits out ``runner_timeout`` and opens a runner
in the parent, whose start must reap every job the dead runners left live (failed,
``restart``), never resume one, and leave nothing live.

``TRIO_BATCH_SOAK=1`` runs 50 rounds (100 kills) instead of 8.
"""

from __future__ import annotations

import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from trio_batch import Config, open_runner, open_store

from ..support.crash_child import CALLERS, CLUSTER_TIMINGS
from ..support.fakes import ScriptedFetch
from ..support.figures import SOAK, Figures, scaled
from .test_crash_campaign import CHILD, RUNNER_ERRORS, UP_TIMEOUT, Campaign, check_rows, read_rows

# SIGKILLs runners sharing PostgreSQL, round after round: left out of make test-fast.
pytestmark = pytest.mark.slow

SEED = 20261130
ROUNDS = scaled(8, 50)
_LIVE = ("queued", "running")


def _start_child(campaign: Campaign, url: str, run: str, rng: random.Random) -> Any:
    side_log = campaign.root / f"side-{run}.jsonl"
    with (campaign.root / f"child-{run}.err").open("wb") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                str(CHILD),
                url,
                str(side_log),
                run,
                str(rng.getrandbits(32)),
                "NORMAL",
                "1" if rng.random() < 0.3 else "0",
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )


def _reap_in_parent(url: str) -> tuple[int, list[str]]:
    """Open a runner on ``url`` (its start reaps); the jobs live inside it, the URLs it fetched."""
    never = ScriptedFetch()

    async def reopen() -> int:
        async with (
            open_store(url) as store,
            open_runner(store, never, Config(**CLUSTER_TIMINGS)),
        ):
            counts = await store.counts(now=time.time())
            return sum(counts.jobs[status] for status in _LIVE)

    return trio.run(reopen), never.calls


def _read(url: str) -> tuple[list[tuple[Any, ...]], dict[str, list[tuple[Any, ...]]]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return read_rows(conn)


def _round(campaign: Campaign, round_no: int, rng: random.Random, url: str) -> None:
    runs = [f"{round_no}a", f"{round_no}b"]
    children = [_start_child(campaign, url, run, rng) for run in runs]
    try:
        for run, child in zip(runs, children, strict=True):
            ready, _, _ = select.select([child.stdout], [], [], UP_TIMEOUT)
            if not (ready and child.stdout.readline().strip() == b"up"):
                campaign.violation(round_no, f"child {run} never came up")
        # The second kill comes up to two runner timeouts after the first: often the survivor
        # has reaped the first runner's jobs by then, while its callers carry on.
        delays = (0.4, 2 * CLUSTER_TIMINGS["runner_timeout"])
        for child, longest in zip(children, delays, strict=True):
            time.sleep(rng.uniform(0, longest))
            child.send_signal(signal.SIGKILL)
            child.wait()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()
    for run, child in zip(runs, children, strict=True):
        if child.returncode != -signal.SIGKILL:
            err = (campaign.root / f"child-{run}.err").read_text(errors="replace")[-2000:]
            campaign.violation(round_no, f"child {run} exited with {child.returncode}: {err}")
        campaign.read_side_log(campaign.root / f"side-{run}.jsonl")
    # Both runners are dead: once they have been silent for runner_timeout, any start reaps.
    time.sleep(CLUSTER_TIMINGS["runner_timeout"] + 2 * CLUSTER_TIMINGS["heartbeat_interval"])
    campaign.reaped += sum(job[1] in _LIVE for job in _read(url)[0])
    live, resumed = _reap_in_parent(url)
    if live:
        campaign.violation(round_no, f"{live} live jobs inside a fresh open_runner")
    if resumed:
        campaign.violation(round_no, f"reaped jobs were resumed: {resumed[:5]}")
    jobs, targets = _read(url)
    check_rows(campaign, round_no, jobs, targets, reaped=True, child_came_up=True)


@pytest.mark.timeout(3600 if SOAK else 600)
def test_sigkills_of_two_runners_sharing_postgresql_lose_and_invent_nothing(
    tmp_path: Path, pg_dsn: str, figures: Figures
) -> None:
    rng = random.Random(SEED)
    campaign = Campaign(tmp_path)
    started = time.monotonic()
    for round_no in range(ROUNDS):
        _round(campaign, round_no, rng, pg_dsn)
    elapsed = time.monotonic() - started
    jobs, targets = _read(pg_dsn)
    outcomes = sum(job[4] for job in jobs)
    restarts = sum(job[2] == "restart" for job in jobs)
    cut = sum(t[4] in RUNNER_ERRORS for rows in targets.values() for t in rows)
    lost_per_run: dict[str, int] = {}
    for run, lost in campaign.unstored.values():
        lost_per_run[run] = lost_per_run.get(run, 0) + lost
    for run, lost in sorted(lost_per_run.items()):
        if lost > CALLERS:  # each of a runner's callers has at most one job draining
            campaign.violation(int(run[:-1]), f"{lost} fetch results of {run} never stored")
    fetched = sum(len(entries) for entries in campaign.fetched.values())
    figures.add(
        f"postgres crash campaign: {2 * ROUNDS} kills of 2 runners sharing one database, "
        f"{len(campaign.violations)} violations; {len(jobs)} jobs, {outcomes} outcomes stored "
        f"({cut} of them 'timeout'/'cancelled' by the runner), "
        f"the fetch returned {fetched} times, {restarts} jobs reaped as 'restart' "
        f"({restarts - campaign.reaped} by the surviving runner, {campaign.reaped} by the "
        "parent's start), "
        f"{sum(lost_per_run.values())} fetch results cut short by a kill, "
        f"{len(campaign.waited)} waits checked, {elapsed:.1f} s"
    )
    assert campaign.violations == [], "\n".join(campaign.violations[:30])
