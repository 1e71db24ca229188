"""The domain rules every backend shares: job ids, the terminal status, the running target."""

from __future__ import annotations

import pytest

from trio_batch import Job, JobState, Result, TargetState, TargetStatus
from trio_batch._model import final_status, is_job_id, new_job_id, with_running


def test_new_job_ids_never_start_with_a_dash_and_are_ids() -> None:
    # One draw in 64 starts with "-"; 20,000 draws would give ~300 of them without the rule.
    ids = [new_job_id() for _ in range(20_000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(is_job_id(i) and len(i) == 22 for i in ids)
    assert len(set(ids)) == len(ids)
    # Every other URL-safe character does start an id, so nothing else was given up.
    assert {i[0] for i in ids} >= set("ABCXYZabcxyz0189_")


def test_ids_made_before_the_rule_are_still_ids() -> None:
    assert is_job_id("-hY3kAd9cQe2Lr0tZq1wXg")
    assert not is_job_id("-hY3kAd9cQe2Lr0tZq1wX")  # 21 characters
    assert not is_job_id("-hY3kAd9cQe2Lr0tZq1wX+")
    assert not is_job_id(22)


@pytest.mark.parametrize(
    ("total", "failed", "final"),
    [(3, 0, JobState.DONE), (3, 1, JobState.PARTIAL), (3, 3, JobState.FAILED), (1, 1, "failed")],
)
def test_final_status(total: int, failed: int, final: JobState) -> None:
    assert final_status(total, failed) == final


def _job(status: JobState, done: int, failed: int = 0, total: int = 3) -> Job:
    return Job("A" * 22, status, None, total, done, failed)


def test_job_counts() -> None:
    job = _job(JobState.PARTIAL, done=3, failed=1)
    assert (job.targets_succeeded, job.targets_unfinished) == (2, 0)
    running = _job(JobState.RUNNING, done=1)
    assert (running.targets_succeeded, running.targets_unfinished) == (1, 2)


def _targets(*states: TargetState) -> list[TargetStatus]:
    return [
        TargetStatus(
            idx=i,
            url=f"u:{i}",
            status=s,
            result=Result("x") if s is TargetState.DONE else None,
            error=None,
            hint=None,
        )
        for i, s in enumerate(states)
    ]


P, D = TargetState.PENDING, TargetState.DONE


def _states(targets: list[TargetStatus]) -> list[str]:
    return [str(t.status) for t in targets]


def test_the_due_target_of_a_running_job_reads_running() -> None:
    shown = with_running(_job(JobState.RUNNING, done=1), _targets(D, P, P))
    assert _states(shown) == ["done", "running", "pending"]


@pytest.mark.parametrize("status", [JobState.CANCELLED, JobState.FAILED, JobState.QUEUED])
def test_no_target_reads_running_in_a_job_that_is_not_running(status: JobState) -> None:
    assert _states(with_running(_job(status, done=1), _targets(D, P, P))) == [
        "done",
        "pending",
        "pending",
    ]


def test_the_runner_names_the_in_flight_target_and_only_it_reads_running() -> None:
    # A job cancelled while its target 1 is being fetched: only the runner knows it is in flight.
    cancelled = with_running(_job(JobState.CANCELLED, done=1), _targets(D, P, P), in_flight=1)
    assert _states(cancelled) == ["done", "running", "pending"]
    # In a running job the runner's word wins over the derived one: never two running targets.
    running = with_running(_job(JobState.RUNNING, done=1), _targets(D, P, P), in_flight=2)
    assert _states(running) == ["done", "pending", "running"]
    # A target that already has its outcome is not shown running again.
    finished = with_running(_job(JobState.RUNNING, done=2), _targets(D, D, P), in_flight=1)
    assert _states(finished) == ["done", "done", "pending"]
