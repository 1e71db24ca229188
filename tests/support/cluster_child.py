"""A runner process for the multi-runner tests: a runner on a PostgreSQL URL, driven by JSON lines.

Run as ``python cluster_child.py URL CONFIG_JSON GATE_DIR``. ``CONFIG_JSON`` holds
:class:`~trio_batch.Config` fields (e.g. short ``heartbeat_interval`` / ``runner_timeout``;
``store_timeout`` is given to ``open_store`` too), and optionally ``listen_url``, a direct URL
for LISTEN beside a pooled ``URL``.
Prints ``{"up": RUNNER_ID}`` once the runner is open, then serves one request per stdin line,
each in a task of its own, answering ``{"id": N, "ok": ANSWER}`` or ``{"id": N, "error":
CLASS}``. Every log record of the runner at INFO or above is printed too, as ``{"log": MESSAGE,
"job_id": ...}``, so the parent can see when the runner learnt of something.

The fetch function is chosen by the target URL's last segment: ``sleep-S`` sleeps S seconds,
``gate-NAME`` writes ``GATE_DIR/NAME.started`` and waits until ``GATE_DIR/NAME`` exists,
``hang`` sleeps forever; the result names the URL.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import trio

from trio_batch import BatchError, Config, Job, Result, Runner, Target, open_runner, open_store


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class _ToStdout(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        emit({"log": record.getMessage(), "job_id": getattr(record, "job_id", None)})


def job_json(job: Job) -> dict[str, Any]:
    return {"id": job.id, "status": str(job.status), "error": job.error, "done": job.targets_done}


async def main(url: str, config: Config, gate_dir: str, listen_url: str | None) -> None:
    async def fetch(target: Target) -> Result:
        kind = target.url.rsplit("/", 1)[-1]
        if kind.startswith("sleep-"):
            await trio.sleep(float(kind[len("sleep-") :]))
        elif kind.startswith("gate-"):
            gate = trio.Path(gate_dir, kind[len("gate-") :])
            await trio.Path(f"{gate}.started").touch()
            # A file from another process: nothing to wait on but the file system.
            while not await gate.exists():  # noqa: ASYNC110
                await trio.sleep(0.02)
        elif kind == "hang":
            await trio.sleep_forever()
        return Result(f"content of {target.url}")

    async def handle(runner: Runner, request: dict[str, Any]) -> None:
        op, rid = request["op"], request["id"]
        try:
            answer: Any
            if op == "submit":
                targets = [Target(u) for u in request["urls"]]
                job_id, reused = await runner.submit(request["caller"], "user", targets)
                answer = {"job": job_id, "reused": reused}
            elif op == "cancel":
                answer = await runner.cancel(request["job"])
            elif op == "wait":
                job = await runner.wait(request["job"])
                answer = None if job is None else job_json(job)
            elif op == "watch":
                answer = []
                async for item in runner.watch(request["job"]):
                    if isinstance(item, Job):
                        answer.append(job_json(item))
                    else:
                        answer.append({"idx": item.idx, "status": str(item.status)})
            elif op == "status":
                status = await runner.status(request["job"])
                answer = None
                if status is not None:
                    job, targets = status
                    answer = {**job_json(job), "targets": [str(t.status) for t in targets]}
            elif op == "drains":
                answer = sorted(runner._drains)  # which jobs this runner is draining now
            elif op == "waiting":
                # How many waits (wait, watch) on a job another runner drains are under way.
                answer = len(runner._elsewhere._jobs.get(request["job"], ()))
            elif op == "status_timed":
                # How long a status call takes to answer or fail (the partition tests).
                started = time.monotonic()
                try:
                    await runner.status(request["job"])
                    answer = {"error": None}
                except BatchError as exc:
                    answer = {"error": type(exc).__name__, "message": str(exc)}
                answer["seconds"] = time.monotonic() - started
            elif op == "burst":
                answer = await burst(runner, request["n"], request["tag"])
            else:
                raise ValueError(f"unknown op {op}")
            emit({"id": rid, "ok": answer})
        except BatchError as exc:
            emit({"id": rid, "error": type(exc).__name__})

    async def burst(runner: Runner, n: int, tag: str) -> dict[str, Any]:
        """``n`` one-target submits from ``n`` callers at once; counts of each answer."""
        answers: dict[str, int] = {}

        async def one(i: int) -> None:
            target = Target(f"https://cluster.test/{tag}/{i}/sleep-0")
            try:
                await runner.submit(f"{tag}-{i}", "user", [target])
                key = "accepted"
            except BatchError as exc:
                key = type(exc).__name__
            answers[key] = answers.get(key, 0) + 1

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
        return {"answers": answers, "seconds": time.perf_counter() - started}

    log = logging.getLogger("trio_batch")
    log.setLevel(logging.INFO)
    log.addHandler(_ToStdout())
    store = await trio.to_thread.run_sync(
        lambda: open_store(url, store_timeout=config.store_timeout, listen_url=listen_url)
    )
    try:
        async with open_runner(store, fetch, config) as runner, trio.open_nursery() as nursery:
            emit({"up": getattr(store, "runner_id", None)})
            async for line in trio.wrap_file(sys.stdin):
                if line.strip():
                    nursery.start_soon(handle, runner, json.loads(line))
            nursery.cancel_scope.cancel()  # stdin closed: shut down
    finally:
        await store.aclose()


if __name__ == "__main__":
    dsn, config_json, gates = sys.argv[1:]
    fields = json.loads(config_json)
    listen = fields.pop("listen_url", None)
    trio.run(main, dsn, Config(**fields), gates, listen)
