"""Keep the benchmark harness from rotting: run its core functions at tiny sizes.

No timing is asserted: these only check that every measurement runs end to end and reports
figures of the right shape. The peers need the optional ``bench`` extra, which ``make test``
does not install: their tests carry the ``peers`` mark, which the default ``pytest`` run leaves
out and ``make bench-quick`` runs (``pytest -m peers``), where a missing peer fails.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import outcome
import pytest
import trio

from benchmarks import (
    ab,
    cycle_probes,
    floor,
    history,
    loop_lag,
    memory,
    minimal,
    open_load,
    peers,
    probes,
    report,
    run,
    soak_floor,
    soak_profile,
    workloads,
)
from trio_batch import Busy, CallerBusy, Config, Result, Store, Target, TargetState


def db(tmp_path: Path, name: str) -> str:
    return str(tmp_path / f"{name}.db")


def test_floor_and_raw_latency(tmp_path: Path) -> None:
    path = db(tmp_path, "floor")
    assert floor.floor_throughput(path, targets=5, targets_per_job=2) > 0
    raw = floor.raw_latency(path, samples=3, targets_per_job=2)
    assert len(raw.submit) == len(raw.status) == 3


def test_runner_workloads(tmp_path: Path) -> None:
    assert workloads.measure_serial(db(tmp_path, "s"), jobs=2, targets_per_job=3) > 0
    got = workloads.measure_concurrent(
        db(tmp_path, "c"), jobs_per_caller=1, targets_per_job=2, callers=2, heartbeat=True
    )
    assert got.targets_per_s > 0
    lat = workloads.measure_latency(db(tmp_path, "l"), samples=2, targets_per_job=3, warmup=1)
    assert len(lat.submit) == len(lat.status) == 2
    assert workloads.measure_idle_heartbeat(db(tmp_path, "i"), seconds=0.02)


def test_under_lock(tmp_path: Path) -> None:
    held = workloads.measure_under_lock(
        db(tmp_path, "k"), hold_seconds=0.1, targets_per_job=2, callers=2, settle_seconds=0.05
    )
    assert held.held_seconds > 0
    assert held.jobs > 0 and held.lateness


def test_history_runs_against_the_store(tmp_path: Path) -> None:
    cache = history.HistoryCache(tmp_path, target_rows=64)
    path = cache.copy()
    assert workloads.measure_serial(path, jobs=1, targets_per_job=2) > 0
    assert floor.raw_latency(path, samples=1, targets_per_job=2).status


def test_memory_subprocess(tmp_path: Path) -> None:
    got = memory.measure_rss(db(tmp_path, "m"), targets=4, targets_per_job=2)
    assert got["peak_rss_bytes"] > 0 and got["wal_bytes"] >= 0


@pytest.mark.peers
@pytest.mark.parametrize("peer", sorted(peers.PEERS))
def test_peer(peer: str, tmp_path: Path) -> None:
    assert peers.installed(peer), f"{peer} is not installed: pip install -e '.[bench]'"
    got = peers.measure_peer(peer, items=3, directory=tmp_path)
    assert got.items == 3 and got.items_per_s > 0
    assert (got.journal_mode, got.synchronous) == ("wal", 1)


def test_whole_round_and_report(tmp_path: Path) -> None:
    tiny = dataclasses.replace(
        run.QUICK,
        rounds=1,
        floor_targets=4,
        serial_jobs=1,
        concurrent_jobs_per_caller=1,
        latency_samples=2,
        history_rows=64,
        lock_hold_seconds=0.1,
        idle_seconds=0.02,
        rss_small=2,
        rss_large=4,
        huey_items=2,
        dbos_items=2,
        targets_per_job=2,
    )
    results = run.run(tiny, mode="smoke", command="pytest", out=tmp_path)
    assert (tmp_path / "quick.json").exists()
    assert {t["verdict"] for t in results["targets"]} <= {"PASS", "MISS", "SKIP"}
    assert not math.isnan(results["figures"]["serial.targets_per_s"]["median"])
    for name in ("minimal.serial", "minimal.concurrent", "cycle.serial", "cycle.concurrent"):
        assert results["figures"][f"{name}.targets_per_s"]["median"] > 0
    for ratio in (
        "concurrent_vs_minimal",
        "cycle_serial_vs_minimal",
        "cycle_concurrent_vs_minimal",
    ):
        assert not math.isnan(results["ratios"][ratio]["median"])
    table = report.render(results)
    assert "floor" in table and "least trio code with the same guarantees, 8 jobs" in table
    assert "cycle (build targets, submit, wait), 8 callers" in table


def test_the_probes_run_and_report_each_comparison(capsys: pytest.CaptureFixture[str]) -> None:
    probes.probe_sql(targets=64, rounds=1)
    probes.probe_checkpoint(jobs=2, rounds=1)
    probes.probe_budget(jobs_per_caller=1, rounds=1)
    probes.probe_watch(sizes=(8,))
    probes.probe_minimal(jobs=1, targets=64, rounds=1)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5
    variants = ("as seen", "returning", "update+select", "neither")
    assert all(f"{variant} " in lines[0] for variant in variants)
    assert "two steps" in lines[1] and "RESTART alone" in lines[1]
    assert "with the budget" in lines[2] and "without" in lines[2] and "p99" in lines[2]
    assert lines[3].startswith("8 targets:") and "watched" in lines[3]
    assert "serial: minimal" in lines[4] and "8 jobs: minimal" in lines[4]
    assert lines[4].count("trio_batch") == 2 and lines[4].count("without savepoints") == 2


def test_the_cycle_probes_run_and_report_each_layer(capsys: pytest.CaptureFixture[str]) -> None:
    cycle_probes.probe_cycle(rounds=1, serial_jobs=1, jobs_per_caller=1)
    cycle_probes.probe_layers(rounds=1, per_job=2)
    out = capsys.readouterr().out
    assert "medians of 1 rounds: 1 caller" in out and "8 callers" in out
    assert "1 write(s) per commit" in out and "8 write(s) per commit" in out
    assert "record_outcome_now (what the drain calls)" in out
    assert "record_outcome (the async call)" in out and "the bare loop's statements" in out


@pytest.mark.parametrize("savepoints", [True, False])
def test_the_minimal_reference_stores_what_the_runner_would(
    tmp_path: Path, savepoints: bool
) -> None:
    path = db(tmp_path, "minimal")
    assert minimal.measure(path, callers=3, jobs=2, targets_per_job=4, savepoints=savepoints) > 0
    conn = floor.connect(path)
    try:
        jobs = conn.execute(
            "SELECT status, targets_done, targets_total, expires_at - created_at > 86400 FROM jobs"
        ).fetchall()
        targets = conn.execute("SELECT status, result, attempts FROM targets").fetchall()
    finally:
        conn.close()
    # Every job drained to its end, its terminal status set, its lease bumped by the writes.
    assert jobs == [("done", 4, 4, 1)] * 6
    assert targets == [("done", floor.EMPTY_RESULT, 1)] * 24


class _Passes(trio.abc.Instrument):
    def __init__(self) -> None:
        self.count = 0

    def after_io_wait(self, timeout: float) -> None:
        self.count += 1


def _bare_loop_commits(callers: int, pass_budget: float | None) -> list[tuple[int, list[str]]]:
    """Each commit of a bare loop of no-op SQL: the pass it ran in, and its writers' jobs."""
    passes = _Passes()
    commits: list[tuple[int, list[str]]] = []

    def commit(writes: minimal.Pending) -> list[outcome.Outcome[None]]:
        if not commits:
            trio.lowlevel.add_instrument(passes)
        commits.append((passes.count, [job_id for (job_id, *_), _ in writes]))
        return [outcome.Value(None) for _ in writes]

    ids = iter(range(1000))
    minimal.run_bare_loop(
        commit,
        lambda caller, urls: f"job{next(ids)}",
        callers=callers,
        jobs=2,
        targets_per_job=4,
        pass_budget=pass_budget,
    )
    return commits


def test_a_lone_bare_writer_commits_on_the_spot_until_the_pass_budget_is_spent() -> None:
    # With room in the pass, a job's writes after its first (which gathers) share its pass,
    # as trio_batch's group commit and fast path let a lone writer; without the budget, or
    # with none left, each write yields first.
    roomy = _bare_loop_commits(1, pass_budget=10.0)
    assert [len({p for p, jobs in roomy if jobs == [job]}) for job in ("job0", "job1")] == [1, 1]
    for spent in (None, 0.0):
        each = _bare_loop_commits(1, pass_budget=spent)
        assert len({p for p, _ in each}) == len(each) == 8


def test_concurrent_bare_writers_still_share_commits_with_a_pass_budget() -> None:
    commits = _bare_loop_commits(3, pass_budget=10.0)
    assert sum(len(jobs) for _, jobs in commits) == 24
    assert max(len(jobs) for _, jobs in commits) == 3


def test_the_paired_runner_measures_each_side_in_its_own_process() -> None:
    # Both sides this tree (the command itself checks BASE out with `git worktree`).
    here = Path(ab.__file__).resolve().parent.parent
    [(base, this)] = ab.paired(here, here, "cycle1", rounds=1)
    assert base > 0 and this > 0


async def test_the_soak_profile_times_passes_steps_and_beats() -> None:
    lines: list[str] = []

    async def heartbeat() -> None:  # named as the soak's: its beats are timed
        for _ in range(20):
            await trio.sleep(0.001)

    async def submitter() -> None:
        for _ in range(20):
            await trio.lowlevel.checkpoint()

    profile = soak_profile.LoopProfile()
    trio.lowlevel.add_instrument(profile)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat)
        nursery.start_soon(submitter)
    trio.lowlevel.remove_instrument(profile)
    profile.report(lines.append)
    assert all(line.startswith("PROF") for line in lines)
    assert any("heartbeat" in line for line in lines) and any(
        "beats, lag p99" in line for line in lines
    )
    assert profile.steps and profile.passes and len(profile.beats) >= 19


def test_the_soak_profile_sums_what_every_long_pass_held() -> None:
    profile = soak_profile.LoopProfile()
    for held in (0.002, 0.003):  # two long passes, each one step of the same kind
        profile.after_io_wait(0.0)
        profile._pass["drain"] += held
        profile._pass_began = time.perf_counter() - 2 * soak_profile.LONG
        profile.before_io_wait(0.0)
    assert profile.long_passes["drain"] == pytest.approx(0.005)


@pytest.mark.parametrize("paced", [False, True])
async def test_the_least_runner_refuses_reuses_cancels_and_drains(
    tmp_path: Path, paced: bool
) -> None:
    release = trio.Event()

    async def fetch(target: Target) -> Result:
        if "slow" in target.url:
            await release.wait()
        if "bad" in target.url:
            raise ValueError("bad target")
        return Result(f"content of {target.url}")

    targets = [Target("https://least.test/slow/a"), Target("https://least.test/slow/bad")]
    slow = [Target("https://least.test/slow/1"), Target("https://least.test/slow/2")]
    with Store.open(db(tmp_path, "least")) as store:
        async with soak_floor.open_least_runner(store, fetch, Config(), paced=paced) as runner:
            job_id, reused = await runner.submit("c1", "user", targets)
            assert not reused
            assert await runner.submit("c1", "user", targets) == (job_id, True)
            with pytest.raises(CallerBusy) as busy:
                await runner.submit("c1", "user", slow)
            assert busy.value.job_id == job_id
            # With seven more slow jobs every slot is taken: another caller is refused.
            ids = [(await runner.submit(f"s{n}", "user", slow))[0] for n in range(7)]
            with pytest.raises(Busy):
                await runner.submit("late", "user", slow)
            # A cancel stops a job after the target in flight; the rest stay pending.
            assert await runner.cancel(ids[0]) and not await runner.cancel(ids[0])
            release.set()
            cancelled = await runner.wait(ids[0])
            assert cancelled is not None and cancelled.status == "cancelled"
            status = await runner.status(ids[0])
            assert status is not None
            assert [t.status for t in status[1]] == [TargetState.DONE, TargetState.PENDING]
            job = await runner.wait(job_id)
            assert job is not None and job.status == "partial" and job.targets_failed == 1
            status = await runner.status(job_id)
            assert status is not None
            assert [t.status for t in status[1]] == [TargetState.DONE, TargetState.FAILED]
            for other in ids[1:]:
                ended = await runner.wait(other)
                assert ended is not None and ended.status == "done"
            assert await runner.status("no-such-job") is None
        assert store.count_live_jobs() == 0


@pytest.mark.parametrize("runner", open_load.RUNNERS)
def test_the_open_load_runs_each_runner_and_reports_its_lag(runner: str) -> None:
    figures = open_load.measure(runner, 200, seconds=0.3)
    assert figures.accepted > 0 and figures.lags and 0 < figures.busy <= 1.5
    assert len(figures.held) == len(figures.lags)
    assert all(held <= lag + 1e-9 for held, lag in zip(figures.held, figures.lags, strict=True))
    line = figures.line(200, runner)
    assert runner in line and "p99" in line and f"{figures.accepted} accepted" in line


def test_the_sleep_past_a_beats_due_time_is_told_from_its_lag() -> None:
    waits = [(0.0, 1.0), (1.5, 2.5), (3.0, 3.2)]
    beats = [(0.5, 1.6), (2.6, 2.9), (0.2, 3.1)]  # due, woke
    slept = loop_lag.slept_past_due(beats, waits)
    assert slept == pytest.approx([0.5 + 0.1, 0.0, 0.8 + 1.0 + 0.1])


async def test_the_idle_waits_are_the_loops_sleeps_not_its_polls() -> None:
    idle = loop_lag.IdleWaits()
    trio.lowlevel.add_instrument(idle)
    try:
        await trio.sleep(0.002)
        for _ in range(5):
            await trio.lowlevel.checkpoint()  # a pass with a task runnable: a poll
    finally:
        trio.lowlevel.remove_instrument(idle)
    assert len(idle.waits) == 1
    (began, ended), *_ = idle.waits
    assert ended - began >= 0.0015
