"""Several runner processes on one PostgreSQL database: the cluster guarantees, end to end.

Each runner is a real process (``cluster_child.py``) on the test's own database, with short
heartbeat settings; the test drives them over stdin/stdout and looks at the database directly.
Nothing here asserts a duration: waits are loops with a generous deadline, and the reap latency
after a SIGKILL is measured and printed as a figure.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from trio_batch.store.postgres import _queries as q

from ..support.figures import Figures
from ..support.pg_server import PgServer

CHILD = str(Path(__file__).parent.parent / "support" / "cluster_child.py")
HEARTBEAT, RUNNER_TIMEOUT, POLL = 0.2, 1.5, 0.2
#: Generous: nothing here should take more than a few seconds, even on a loaded machine.
DEADLINE = 60.0


class Child:
    """One runner process, driven by JSON lines."""

    def __init__(self, dsn: str, gate_dir: Path, **config: Any) -> None:
        settings = {
            "heartbeat_interval": HEARTBEAT,
            "runner_timeout": RUNNER_TIMEOUT,
            "poll_interval": POLL,
            **config,
        }
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, dsn, json.dumps(settings), str(gate_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._ids = itertools.count(1)
        self._answers: dict[int, dict[str, Any]] = {}
        self.logs: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        threading.Thread(target=self._read, daemon=True).start()
        self.runner_id = self._until(lambda: self._up, "the runner to start")

    _up: str | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            with self._changed:
                if "up" in message:
                    self._up = message["up"]
                elif "log" in message:
                    self.logs.append(message)
                else:
                    self._answers[message["id"]] = message
                self._changed.notify_all()

    def _until(self, check: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + DEADLINE
        with self._changed:
            while True:
                value = check()
                if value:
                    return value
                if self.proc.poll() is not None:
                    code = self.proc.returncode
                    raise AssertionError(f"the runner exited ({code}) before {what}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"timed out waiting for {what}")
                self._changed.wait(0.1)

    def send(self, op: str, **args: Any) -> int:
        """Send a request; returns its id (see :meth:`answer`)."""
        rid = next(self._ids)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": rid, "op": op, **args}) + "\n")
        self.proc.stdin.flush()
        return rid

    def answer(self, rid: int) -> dict[str, Any]:
        """The answer to request ``rid``: ``{"ok": ...}`` or ``{"error": CLASS}``."""
        return self._until(lambda: self._answers.get(rid), f"the answer to request {rid}")  # type: ignore[no-any-return]

    def call(self, op: str, **args: Any) -> Any:
        """Send a request and return its answer; a refusal fails the test."""
        answer = self.answer(self.send(op, **args))
        assert "ok" in answer, answer
        return answer["ok"]

    def wait_log(self, message: str | tuple[str, ...], job_id: str) -> None:
        """Until the runner has logged ``message`` (or one of several) about ``job_id``."""
        messages = (message,) if isinstance(message, str) else message
        self._until(
            lambda: any(m["log"] in messages and m["job_id"] == job_id for m in self.logs),
            f"the log line {' or '.join(map(repr, messages))} for {job_id}",
        )

    def stop(self) -> None:
        """Close stdin (the child shuts down); kill it if it does not."""
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    self.proc.stdin.close()
            try:
                self.proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def spawn(pg_dsn: str, tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """Start runner processes on the test's database (through ``url``, if given, a URL of
    it with other options); all are stopped at the end."""
    children: list[Child] = []

    def start(url: str | None = None, **config: Any) -> Child:
        child = Child(url or pg_dsn, tmp_path, **config)
        children.append(child)
        return child

    try:
        yield start
    finally:
        for child in children:
            if child.proc.poll() is None:
                os.kill(child.proc.pid, signal.SIGCONT)  # a stopped child cannot shut down
            child.stop()


def _sql(dsn: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def _job(dsn: str, job_id: str) -> tuple[str, str | None, int]:
    """The job's status, error and outcomes stored so far (a live job's, in its live row)."""
    rows = _sql(
        dsn, f"SELECT status, error, targets_done FROM {q.JOBS_NOW} AS j WHERE id = %s", (job_id,)
    )
    assert rows, f"no job {job_id}"
    return rows[0]  # type: ignore[return-value]


def _outcomes(dsn: str, job_id: str) -> list[tuple[Any, ...]]:
    return _sql(
        dsn,
        "SELECT idx, status, result, error, finished_at FROM targets WHERE job_id = %s "
        "ORDER BY idx",
        (job_id,),
    )


def _until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _urls(tag: str, *kinds: str) -> list[str]:
    return [f"https://cluster.test/{tag}/{i}/{kind}" for i, kind in enumerate(kinds)]


def test_caps_and_reuse_hold_whichever_runner_takes_the_submits(
    spawn: Callable[..., Child], pg_dsn: str
) -> None:
    runners = [spawn(jobs_total=4, jobs_per_caller=1) for _ in range(3)]
    same = _urls("same", "hang", "hang")
    sent = [(r, r.send("submit", caller="same", urls=same)) for r in runners for _ in range(3)]
    answers = [(r, r.answer(rid)["ok"]) for r, rid in sent]
    assert len({a["job"] for _, a in answers}) == 1
    created = [r for r, a in answers if not a["reused"]]
    assert len(created) == 1  # reused=True from every other submit, on every runner
    job_id = answers[0][1]["job"]
    # The runner that accepted it drains it.
    assert _sql(pg_dsn, "SELECT owner FROM jobs WHERE id = %s", (job_id,)) == [
        (created[0].runner_id,)
    ]
    for runner in runners:
        other = runner.answer(runner.send("submit", caller="same", urls=_urls("o", "hang")))
        assert other == {"id": other["id"], "error": "CallerBusy"}
    # Twelve callers at once across the three runners: the total cap (4) admits three more.
    sent = [
        (runners[i % 3], runners[i % 3].send("submit", caller=f"c{i}", urls=_urls(f"c{i}", "hang")))
        for i in range(12)
    ]
    results = [(r, r.answer(rid)) for r, rid in sent]
    accepted = [(r, a["ok"]["job"]) for r, a in results if "ok" in a]
    assert len(accepted) == 3
    assert sorted(a["error"] for _, a in results if "ok" not in a) == ["Busy"] * 9
    live = "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
    assert _sql(pg_dsn, live) == [(4,)]
    for runner, accepted_id in accepted:
        assert accepted_id in runner.call("drains")
        assert _sql(pg_dsn, "SELECT owner FROM jobs WHERE id = %s", (accepted_id,)) == [
            (runner.runner_id,)
        ]


def test_a_cancel_through_another_runner_stops_the_drain_after_the_target_in_flight(
    spawn: Callable[..., Child], pg_dsn: str, tmp_path: Path
) -> None:
    a, b = spawn(), spawn()
    job_id = a.call("submit", caller="alice", urls=_urls("x", "gate-g0", "gate-g1", "gate-g2"))[
        "job"
    ]
    _until(lambda: (tmp_path / "g0.started").exists(), "target 0 to start")
    waiting = b.send("wait", job=job_id)
    assert b.call("cancel", job=job_id) is True
    assert _job(pg_dsn, job_id)[0] == "cancelled"  # marked at once, by the runner asked
    a.wait_log("job cancelled through another runner", job_id)
    # The job is cancelled but A's fetch is still in flight: B's wait does not end yet.
    time.sleep(5 * POLL)
    assert b._answers.get(waiting) is None
    (tmp_path / "g0").touch()
    finished = b.answer(waiting)["ok"]
    assert finished["status"] == "cancelled"
    # The in-flight target was stored; the rest stay pending and never started.
    assert [o[1] for o in _outcomes(pg_dsn, job_id)] == ["done", "pending", "pending"]
    assert not (tmp_path / "g1.started").exists()
    assert job_id not in a.call("drains")


def test_a_second_cancel_of_a_cancelled_job_is_false_on_every_runner(
    spawn: Callable[..., Child], pg_dsn: str, tmp_path: Path
) -> None:
    a, b = spawn(), spawn()
    job_id = a.call("submit", caller="alice", urls=_urls("x", "gate-g0", "gate-g1"))["job"]
    _until(lambda: (tmp_path / "g0.started").exists(), "target 0 to start")
    assert b.call("cancel", job=job_id) is True
    # Target 0 is still in flight on A, and A's drain alive: both runners answer False now.
    assert b.call("cancel", job=job_id) is False
    assert a.call("cancel", job=job_id) is False
    assert job_id in a.call("drains")
    (tmp_path / "g0").touch()
    assert b.call("wait", job=job_id)["status"] == "cancelled"
    assert [o[1] for o in _outcomes(pg_dsn, job_id)] == ["done", "pending"]


def test_a_drain_that_learns_of_a_cancel_from_its_own_write_releases_the_job(
    spawn: Callable[..., Child], pg_dsn: str, tmp_path: Path
) -> None:
    """A polls too rarely to learn of B's cancel: the write of its target in flight tells it."""
    a, b = spawn(poll_interval=600), spawn()
    job_id = a.call("submit", caller="alice", urls=_urls("x", "gate-g0", "gate-g1"))["job"]
    _until(lambda: (tmp_path / "g0.started").exists(), "target 0 to start")
    assert b.call("cancel", job=job_id) is True
    waiting = b.send("wait", job=job_id)
    (tmp_path / "g0").touch()
    assert b.answer(waiting)["ok"]["status"] == "cancelled"
    assert [o[1] for o in _outcomes(pg_dsn, job_id)] == ["done", "pending"]
    assert not (tmp_path / "g1.started").exists()


def test_a_cancel_through_another_runner_honours_cancel_grace(
    spawn: Callable[..., Child], pg_dsn: str, tmp_path: Path
) -> None:
    a, b = spawn(cancel_grace=0.3), spawn()
    job_id = a.call("submit", caller="alice", urls=_urls("x", "gate-never", "sleep-0"))["job"]
    _until(lambda: (tmp_path / "never.started").exists(), "target 0 to start")
    assert b.call("cancel", job=job_id) is True
    finished = b.call("wait", job=job_id)
    assert finished["status"] == "cancelled"
    outcomes = _outcomes(pg_dsn, job_id)
    assert [(o[1], o[3]) for o in outcomes] == [("failed", "cancelled"), ("pending", None)]


def test_wait_and_watch_follow_a_job_another_runner_drains(
    spawn: Callable[..., Child], pg_dsn: str
) -> None:
    a, b = spawn(), spawn()
    job_id = a.call("submit", caller="alice", urls=_urls("w", *["sleep-0.1"] * 4))["job"]
    watching = b.send("watch", job=job_id)
    finished = b.call("wait", job=job_id)
    assert finished["status"] == "done" and finished["done"] == 4
    items = b.answer(watching)["ok"]
    assert items[:-1] == [{"idx": i, "status": "done"} for i in range(4)]
    assert items[-1]["status"] == "done"
    assert b.call("status", job=job_id)["targets"] == ["done"] * 4


def test_a_killed_runners_jobs_are_reaped_and_the_others_finish(
    spawn: Callable[..., Child], pg_dsn: str, figures: Figures
) -> None:
    a, b = spawn(), spawn()
    a_job = a.call("submit", caller="alice", urls=_urls("k", *["sleep-0.1"] * 30))["job"]
    b_job = b.call("submit", caller="bob", urls=_urls("k", *["sleep-0.1"] * 25))["job"]
    _until(lambda: _job(pg_dsn, a_job)[2] >= 2, "two of A's targets to be stored")
    a.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    a.proc.wait()
    status, error, done = _until(
        lambda: (job := _job(pg_dsn, a_job))[0] != "running" and job, "A's job to be reaped"
    )
    latency = time.monotonic() - killed
    assert (status, error) == ("failed", "restart")
    # What A stored before it died stays readable; nothing was resumed.
    stored = [o for o in _outcomes(pg_dsn, a_job) if o[1] != "pending"]
    assert len(stored) == done >= 2
    finished = b.call("wait", job=b_job)
    assert (finished["status"], finished["done"]) == ("done", 25)
    figures.add(
        f"postgres cluster: reap latency after SIGKILL {latency:.2f} s "
        f"(heartbeat_interval {HEARTBEAT:g} s, runner_timeout {RUNNER_TIMEOUT:g} s)"
    )


def test_a_runner_paused_past_runner_timeout_writes_nothing_into_its_reaped_jobs(
    spawn: Callable[..., Child], pg_dsn: str
) -> None:
    a, b = spawn(), spawn()  # B reaps A
    job_id = a.call("submit", caller="alice", urls=_urls("p", *["sleep-0.1"] * 30))["job"]
    _until(lambda: _job(pg_dsn, job_id)[2] >= 2, "two of A's targets to be stored")
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        _until(lambda: _job(pg_dsn, job_id)[0] != "running", "A's job to be reaped by B")
        reaped = _outcomes(pg_dsn, job_id)
        assert _job(pg_dsn, job_id)[:2] == ("failed", "restart")
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    # A comes back: its drain of the reaped job stops, having written nothing into it.
    _until(lambda: job_id not in a.call("drains"), "A's drain of the reaped job to stop")
    assert _outcomes(pg_dsn, job_id) == reaped
    assert _job(pg_dsn, job_id)[:2] == ("failed", "restart")
    # ... and it carries on serving, as a fresh runner, once registered again. (Until its next
    # heartbeat does that, a submit is refused with StoreUnavailable, "submit it again"; the
    # drain may stop first, on the news that its job was reaped.)
    _until(
        lambda: (
            {row[0] for row in _sql(pg_dsn, "SELECT id FROM runners")} - {a.runner_id, b.runner_id}
        ),
        "A to register again under a new id",
    )
    new_job = a.call("submit", caller="alice2", urls=_urls("p2", "sleep-0", "sleep-0"))["job"]
    assert a.call("wait", job=new_job)["status"] == "done"
    (owner,) = _sql(pg_dsn, "SELECT owner FROM jobs WHERE id = %s", (new_job,))[0]
    assert owner is not None and owner != a.runner_id


async def test_a_runner_whose_heartbeat_is_overdue_starts_no_new_target(pg_dsn: str) -> None:
    """In one process: the test holds the runner's registry row locked, so its heartbeats fail."""
    import trio

    from trio_batch import Config, Job, open_runner
    from trio_batch.store.postgres import PostgresJobStore

    from ..support.fakes import ScriptedFetch, urls

    fetch = ScriptedFetch()
    first_started, first_release = fetch.gate("https://example.test/first")
    second_started = fetch.watch("https://example.test/second")
    config = Config(heartbeat_interval=0.1, runner_timeout=1.0, poll_interval=0.05)
    store = PostgresJobStore.open(pg_dsn)
    blocker = psycopg.connect(pg_dsn)  # not autocommit: its row lock lasts until commit
    try:
        async with open_runner(store, fetch, config) as runner:
            job_id, _ = await runner.submit("alice", "user", urls("first", "second"))
            await first_started.wait()
            blocker.execute("SELECT 1 FROM runners WHERE id = %s FOR UPDATE", (store.runner_id,))
            while store.can_start_target():  # noqa: ASYNC110 (a clock-based verdict)
                await trio.sleep(0.02)
            first_release.set()
            # The outcome in flight is stored, but the next target waits for a heartbeat.
            async with contextlib.aclosing(runner.watch(job_id)) as outcomes:
                first = await anext(outcomes)
            assert not isinstance(first, Job) and first.idx == 0 and first.is_finished
            await trio.sleep(0.3)
            assert not second_started.is_set()
            blocker.commit()  # the heartbeat gets through again
            finished = await runner.wait(job_id)
            assert finished is not None and finished.status.value == "done"
            assert second_started.is_set()
    finally:
        blocker.close()
        await store.aclose()


def test_submits_from_three_runners_at_once_keep_the_total_cap(
    spawn: Callable[..., Child], pg_dsn: str, figures: Figures
) -> None:
    # 600 creations queue on one lock: on a loaded machine the last may wait past the default
    # store_timeout (5 s) and be refused as StoreUnavailable; this is about the cap, not speed.
    runners = [spawn(jobs_total=8, store_timeout=120) for _ in range(3)]
    live = "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
    peak = 0
    sampling = threading.Event()

    def sample() -> None:
        nonlocal peak
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            while not sampling.is_set():
                peak = max(peak, conn.execute(live).fetchone()[0])  # type: ignore[index]

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        sent = [(r, r.send("burst", n=200, tag=f"r{i}")) for i, r in enumerate(runners)]
        bursts = [r.answer(rid)["ok"] for r, rid in sent]
    finally:
        sampling.set()
        sampler.join()
    answers: dict[str, int] = {}
    for burst in bursts:
        for key, count in burst["answers"].items():
            answers[key] = answers.get(key, 0) + count
    assert sum(answers.values()) == 600
    assert set(answers) <= {"accepted", "Busy"} and answers.get("accepted", 0) >= 1
    assert peak <= 8
    seconds = max(b["seconds"] for b in bursts)
    figures.add(
        f"postgres cluster: {600 / seconds:.0f} submits/s from 3 runner processes at once "
        f"(jobs_total 8 enforced: {answers.get('accepted', 0)} accepted, "
        f"{answers.get('Busy', 0)} Busy; peak live jobs seen {peak})"
    )


def test_a_database_restart_mid_drain_loses_nothing_and_counts_nothing_twice(
    spawn: Callable[..., Child], pg_dsn: str, pg_server: PgServer
) -> None:
    # A runner_timeout longer than the restart: this is about reconnecting, not reaping.
    a = spawn(runner_timeout=30)
    urls = _urls("r", *["sleep-0.05"] * 30)
    job_id = a.call("submit", caller="alice", urls=urls)["job"]
    _until(lambda: _job(pg_dsn, job_id)[2] >= 3, "three of A's targets to be stored")
    # A clean ("fast") stop: the clients are cut off as by a crash, but the test server's
    # relaxed durability (synchronous_commit=off) loses no acknowledged commit.
    pg_server.stop("fast")
    pg_server.start()
    finished = a.call("wait", job=job_id)
    assert (finished["status"], finished["done"]) == ("done", 30)
    # The restart did cut the drain off: a write failed and was retried.
    assert any(m["log"] == "could not store an outcome; retrying" for m in a.logs)
    outcomes = _outcomes(pg_dsn, job_id)
    assert [(o[1], o[2]) for o in outcomes] == [
        ("done", json.dumps({"content": f"content of {url}", "meta": {}}, separators=(",", ":")))
        for url in urls
    ]
    assert _sql(
        pg_dsn, "SELECT targets_done, targets_failed FROM jobs WHERE id = %s", (job_id,)
    ) == [(30, 0)]
