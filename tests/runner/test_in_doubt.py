"""The runner's memory of creates in doubt (``_in_doubt``): bounded, each until its job's lease
would lapse, each drain taken once and only for a live job."""

from __future__ import annotations

from trio_batch import Job, JobState
from trio_batch._model import new_job_id
from trio_batch.runner._drain import _Drain
from trio_batch.runner._in_doubt import IN_DOUBT_MAX, InDoubt

from ..support.fakes import FakeClock, urls

TTL = 3600.0


def _drain() -> _Drain:
    return _Drain(new_job_id(), "alice", tuple(urls("a", "b")))


def _job(drain: _Drain, status: JobState = JobState.RUNNING) -> Job:
    return Job(drain.job_id, status, None, len(drain.targets), 0, caller=drain.caller)


def test_a_live_job_gets_a_fresh_drain_of_the_same_targets_once() -> None:
    in_doubt = InDoubt(TTL, FakeClock())
    old = _drain()
    in_doubt.add(old)
    fresh = in_doubt.take(_job(old))
    assert fresh is not None and fresh is not old
    assert (fresh.job_id, fresh.caller, fresh.targets) == (old.job_id, old.caller, old.targets)
    assert in_doubt.take(_job(old)) is None and len(in_doubt) == 0


def test_a_terminal_job_or_one_never_in_doubt_gets_none() -> None:
    in_doubt = InDoubt(TTL, FakeClock())
    done = _drain()
    in_doubt.add(done)
    assert in_doubt.take(_job(done, JobState.CANCELLED)) is None
    assert in_doubt.take(_job(_drain())) is None


def test_an_entry_goes_once_its_lease_would_lapse_and_the_oldest_past_the_cap() -> None:
    clock = FakeClock()
    in_doubt = InDoubt(TTL, clock)
    lapsing = _drain()
    in_doubt.add(lapsing)
    clock.advance(TTL)
    assert in_doubt.take(_job(lapsing)) is None
    drains = [_drain() for _ in range(IN_DOUBT_MAX + 1)]
    for drain in drains:
        in_doubt.add(drain)
    assert len(in_doubt) == IN_DOUBT_MAX
    assert in_doubt.take(_job(drains[0])) is None
    assert in_doubt.take(_job(drains[-1])) is not None
