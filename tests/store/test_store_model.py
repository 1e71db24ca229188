"""Model-based test of the Store: random operation sequences against a tiny reference model.

Hypothesis drives submit (``create_job`` with status ``running``), cancel and fail
(``finish_job``), complete a target (``record_outcome``), advance the injected clock, purge and
``mark_in_flight_failed`` on an in-memory store, and checks after every step that:

- what the store reports (``get_job``, ``get_status``, ``count_live_jobs``) matches the model:
  statuses, counts, leases (a lapsed job reads as absent), idempotent reuse within the lease;
- live counts never exceed the caps (per caller and in total);
- a terminal status never changes, for as long as the row exists.

Under ``TRIO_BATCH_SOAK=1`` it runs many more sequences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from trio_batch import (
    Busy,
    CallerBusy,
    JobState,
    OutcomeExists,
    Result,
    Store,
    Target,
    TargetState,
    TooManyTargets,
)
from trio_batch.store import NewJob

from ..support.fakes import T0
from ..support.figures import Figures, scaled

# long Hypothesis state machines (longer still under make soak): left out of make test-fast.
pytestmark = pytest.mark.slow

TTL = 10.0
CALLERS = ("ann", "bob", "cyd", "dee")
URLS = tuple(f"https://model.test/{name}" for name in "abcd")
TERMINAL = (JobState.DONE, JobState.FAILED, JobState.PARTIAL, JobState.CANCELLED)
LIVE = (JobState.QUEUED, JobState.RUNNING)
#: A well-formed id no job has.
UNKNOWN_ID = "A" * 22

#: What the machines did, summed over every example (for the printed figures).
STEPS: dict[str, int] = {}
SEQUENCES: list[str] = []


@dataclass
class ModelJob:
    id: str
    caller: str
    urls: tuple[str, ...]
    expires_at: float
    status: JobState = JobState.RUNNING
    error: str | None = None
    outcomes: list[str | None] = field(default_factory=list)

    @property
    def done(self) -> int:
        return sum(o is not None for o in self.outcomes)

    @property
    def failed(self) -> int:
        return self.outcomes.count("failed")


class StoreMachine(RuleBasedStateMachine):
    """The store against the model, with one set of caps."""

    targets_per_job: ClassVar[int] = 3
    jobs_per_caller: ClassVar[int] = 1
    jobs_total: ClassVar[int] = 3

    def __init__(self) -> None:
        super().__init__()
        self.store = Store.open()
        self.now = T0
        self.jobs: dict[str, ModelJob] = {}  # rows the store holds (lapsed ones included)
        self.ids: list[str] = []  # every id ever created, purged ones included
        self.terminal: dict[str, tuple[str, str | None]] = {}  # first terminal (status, error)
        SEQUENCES.append(type(self).__name__)

    def teardown(self) -> None:
        self.store.close()

    def count(self, what: str) -> None:
        STEPS[what] = STEPS.get(what, 0) + 1

    # ----------------------------------------------------------------------------------------
    # The model

    def visible(self, job_id: str) -> ModelJob | None:
        job = self.jobs.get(job_id)
        return job if job is not None and job.expires_at > self.now else None

    def live(self, caller: str | None = None) -> int:
        """Live by status, not lease, as the store counts them for its caps."""
        return sum(
            j.status in LIVE and (caller is None or j.caller == caller) for j in self.jobs.values()
        )

    def pick_id(self, data: st.DataObject) -> str:
        """Mostly a live job's id, sometimes any id ever created, now and then a bad one."""
        live = [j.id for j in self.jobs.values() if j.status in LIVE and j.expires_at > self.now]
        choice = data.draw(st.integers(0, 9), label="which kind of id")
        if live and choice <= 5:
            return data.draw(st.sampled_from(live), label="live job id")
        if self.ids and choice <= 8:
            return data.draw(st.sampled_from(self.ids), label="job id")
        return data.draw(st.sampled_from([UNKNOWN_ID, "", "not an id"]), label="bad id")

    # ----------------------------------------------------------------------------------------
    # Rules

    @rule(
        caller=st.sampled_from(CALLERS),
        urls=st.lists(st.sampled_from(URLS), min_size=1, max_size=4, unique=True),
    )
    def submit(self, caller: str, urls: list[str]) -> None:
        self.create(caller, urls)

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data())
    def resubmit(self, data: st.DataObject) -> None:
        """Submit the targets of a job again, for the same caller: a reuse within its lease."""
        job = self.jobs.get(data.draw(st.sampled_from(self.ids), label="job id"))
        if job is not None:
            self.create(job.caller, list(job.urls))

    def create(self, caller: str, urls: list[str]) -> None:
        key = tuple(urls)
        reusable = [
            j
            for j in self.jobs.values()
            if j.caller == caller and j.urls == key and j.expires_at > self.now
        ]
        expected: type[Exception] | None = None
        if not reusable:
            if len(urls) > self.targets_per_job:
                expected = TooManyTargets
            elif self.live(caller) >= self.jobs_per_caller:
                expected = CallerBusy
            elif self.live() >= self.jobs_total:
                expected = Busy
        try:
            job, reused = self.store.create_job(
                NewJob(
                    caller,
                    "user",
                    [Target(u) for u in urls],
                    ttl=TTL,
                    targets_per_job=self.targets_per_job,
                    jobs_per_caller=self.jobs_per_caller,
                    jobs_total=self.jobs_total,
                    status=JobState.RUNNING,
                ),
                now=self.now,
            )
        except (TooManyTargets, CallerBusy, Busy) as exc:
            assert type(exc) is expected, f"{type(exc).__name__}, expected {expected}"
            self.count(f"submit refused ({type(exc).__name__})")
            return
        assert expected is None, f"accepted, expected {expected.__name__}"
        if reusable:
            (model,) = reusable  # a lapsed job cannot be bumped, so one key has one live lease
            assert reused and job.id == model.id
            self.count("submit reused")
        else:
            assert not reused and job.id not in self.jobs
            model = ModelJob(job.id, caller, key, self.now + TTL, outcomes=[None] * len(urls))
            self.jobs[job.id] = model
            self.ids.append(job.id)
            self.count("submit created")
        self.check_job(job.id, job)

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data(), status=st.sampled_from(TERMINAL), error=st.sampled_from([None, "x"]))
    def finish(self, data: st.DataObject, status: JobState, error: str | None) -> None:
        """Cancel (or fail) a job, as the runner does."""
        job_id = self.pick_id(data)
        model = self.visible(job_id)
        job = self.store.finish_job(job_id, status, error=error, now=self.now)
        if model is None or model.status not in LIVE:
            assert job is None
            reason = "terminal" if model else "lapsed" if job_id in self.jobs else "unknown"
            self.count(f"finish refused ({reason})")
            return
        model.status, model.error = status, error
        assert job is not None
        self.check_job(job_id, job)
        self.count(f"finish {status}")

    def pending(self) -> list[str]:
        return [
            j.id
            for j in self.jobs.values()
            if j.expires_at > self.now and None in j.outcomes and j.status in LIVE
        ]

    @precondition(lambda self: bool(self.pending()))
    @rule(data=st.data(), fail=st.booleans())
    def complete_due(self, data: st.DataObject, fail: bool) -> None:
        """Store the outcome of a live job's next target, as its drain would."""
        job_id = data.draw(st.sampled_from(self.pending()), label="job id")
        self.complete(job_id, self.jobs[job_id].outcomes.index(None), fail)

    @precondition(lambda self: bool(self.ids))
    @rule(data=st.data(), idx=st.integers(0, 4), fail=st.booleans())
    def complete_any(self, data: st.DataObject, idx: int, fail: bool) -> None:
        """Store an outcome for any target of any job (stored, lapsed, unknown index...)."""
        job_id = data.draw(st.sampled_from(self.ids), label="job id")
        self.complete(job_id, idx, fail)

    def complete(self, job_id: str, idx: int, fail: bool) -> None:
        model = self.jobs.get(job_id)
        outcome: dict[str, Any] = {"error": "boom"} if fail else {"result": Result(f"r{idx}")}
        try:
            job = self.store.record_outcome(job_id, idx, ttl=TTL, now=self.now, **outcome)
        except OutcomeExists:
            assert model is not None and self.visible(job_id) is model
            assert idx >= len(model.outcomes) or model.outcomes[idx] is not None
            self.count("complete refused (exists)")
            return
        if self.visible(job_id) is None:
            assert job is None
            self.count("complete refused (lapsed)")
            return
        assert model is not None and job is not None
        assert idx < len(model.outcomes) and model.outcomes[idx] is None
        model.outcomes[idx] = "failed" if fail else "done"
        model.expires_at = self.now + TTL
        if model.done == len(model.outcomes) and model.status in LIVE:
            if model.failed == 0:
                model.status = JobState.DONE
            elif model.failed == len(model.outcomes):
                model.status = JobState.FAILED
            else:
                model.status = JobState.PARTIAL
        self.check_job(job_id, job)
        # The whole answer, not only what the model tracks: the job as the store now holds it,
        # whether or not it was built from ``seen``.
        assert job == self.store.get_job(job_id, now=self.now)
        self.count("complete stored")

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0, TTL - 1, TTL, TTL + 1]))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.count("advance")

    @precondition(lambda self: any(j.expires_at <= self.now for j in self.jobs.values()))
    @rule(batch_size=st.integers(1, 3), max_batches=st.none() | st.integers(1, 2))
    def purge(self, batch_size: int, max_batches: int | None) -> None:
        lapsed = sorted(
            (j for j in self.jobs.values() if j.expires_at <= self.now), key=lambda j: j.expires_at
        )
        deleted = self.store.purge_expired(self.now, batch_size=batch_size, max_batches=max_batches)
        limit = len(lapsed) if max_batches is None else batch_size * max_batches
        assert deleted == min(len(lapsed), limit)
        remaining = {row[0] for row in self.store.db.execute("SELECT id FROM jobs")}
        gone = [j for j in lapsed if j.id not in remaining]
        assert len(gone) == deleted and set(self.jobs) - remaining == {j.id for j in gone}
        kept = [j for j in lapsed if j.id in remaining]
        if gone and kept:  # oldest leases first
            assert max(j.expires_at for j in gone) <= min(j.expires_at for j in kept)
        for job in gone:
            del self.jobs[job.id]
            self.terminal.pop(job.id, None)
        orphans = self.store.db.execute(
            "SELECT count(*) FROM targets WHERE job_id NOT IN (SELECT id FROM jobs)"
        ).fetchone()[0]
        assert orphans == 0
        self.count("purge")

    @precondition(lambda self: self.live() > 0)
    @rule(reason=st.sampled_from(["restart", "shutdown"]))
    def mark_in_flight_failed(self, reason: str) -> None:
        assert self.store.mark_in_flight_failed(reason, now=self.now) == self.live()
        for job in self.jobs.values():
            if job.status in LIVE:
                job.status, job.error = JobState.FAILED, reason
        self.count("mark_in_flight_failed")

    # ----------------------------------------------------------------------------------------
    # Checks

    def check_job(self, job_id: str, job: Any) -> None:
        model = self.jobs[job_id]
        assert (
            job.id,
            job.caller,
            job.status,
            job.error,
            job.targets_total,
            job.targets_done,
            job.targets_failed,
            job.expires_at,
        ) == (
            model.id,
            model.caller,
            model.status,
            model.error,
            len(model.outcomes),
            model.done,
            model.failed,
            model.expires_at,
        )

    @invariant()
    def store_matches_model(self) -> None:
        for job_id in self.ids:
            model = self.visible(job_id)
            status = self.store.get_status(job_id, now=self.now)
            if model is None:
                assert status is None, f"{job_id} should read as absent"
                assert self.store.get_job(job_id, now=self.now) is None
                continue
            assert status is not None, f"{job_id} should be visible"
            job, targets = status
            self.check_job(job_id, job)
            expected = [TargetState(o or "pending") for o in model.outcomes]
            due = model.done  # a running job's target at idx targets_done reads as running
            if model.status is JobState.RUNNING and expected[due : due + 1] == ["pending"]:
                expected[due] = TargetState.RUNNING
            assert [t.status for t in targets] == expected
            assert [t.url for t in targets] == list(model.urls)

    @invariant()
    def live_counts_within_caps(self) -> None:
        total = self.store.count_live_jobs()
        assert total == self.live() <= self.jobs_total
        for caller in CALLERS:
            assert self.store.count_live_jobs(caller) == self.live(caller) <= self.jobs_per_caller

    @invariant()
    def terminal_statuses_never_change(self) -> None:
        for job_id, status, error in self.store.db.execute("SELECT id, status, error FROM jobs"):
            if status in LIVE:
                assert job_id not in self.terminal, f"{job_id} went back to {status}"
                continue
            first = self.terminal.setdefault(job_id, (status, error))
            assert first == (status, error), f"{job_id} changed from {first} to {status}"


class WiderCapsMachine(StoreMachine):
    """Two live jobs per caller, four in all, and bigger jobs."""

    targets_per_job = 4
    jobs_per_caller = 2
    jobs_total = 4


SETTINGS = settings(
    max_examples=scaled(80, 2000),
    stateful_step_count=scaled(40, 80),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TestStoreModel = StoreMachine.TestCase
TestStoreModel.settings = SETTINGS
TestStoreModelWiderCaps = WiderCapsMachine.TestCase
TestStoreModelWiderCaps.settings = SETTINGS


def test_store_model_figures(figures: Figures) -> None:
    """Print what the two machines above exercised (they run first: same module, file order)."""
    total = sum(STEPS.values())
    detail = ", ".join(f"{name} {n}" for name, n in sorted(STEPS.items()))
    figures.add(f"store model: {len(SEQUENCES)} sequences, {total} checked steps ({detail})")
