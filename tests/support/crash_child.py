"""The crash campaigns' child: a runner on a database, busy until it is killed.

Run as ``python crash_child.py DB SIDE_LOG RUN SEED SYNCHRONOUS TIMEOUTS``. It opens a runner on
``DB``, a file or a ``postgresql://`` URL (then with ``CLUSTER_TIMINGS``; SYNCHRONOUS is unused)
(with ``TIMEOUTS=1``, a short ``target_timeout`` and ``cancel_grace``, so the runner also
stores outcomes of its own: ``"timeout"`` and ``"cancelled"``)
and keeps several callers submitting, waiting for and sometimes cancelling jobs, forever. Its
fetch function appends what it is about to return (or the error it is about to raise) to
``SIDE_LOG`` as one JSON line, flushed and fsynced before it returns, so the parent can check
that every stored outcome is one the fetch really produced; after each ``wait`` the caller
appends the status it was told, so the parent can check that the job stays that way. Target
URLs are unique per job (``RUN`` is part of them), so a URL names one target of one job. It
prints ``up`` once the runner is open. Imports are kept to the minimum: the parent starts one
child per kill.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
from typing import Any, TextIO

import trio

from trio_batch import (
    BatchError,
    Config,
    JobStore,
    Result,
    Runner,
    Store,
    Target,
    open_runner,
    open_store,
)

#: How many callers submit at once (the default caps allow one live job per caller, 8 in all).
CALLERS = 5
#: Chance that a result is big enough to be written on the store thread, not the fast path.
BIG_RESULTS = 0.03
BIG_CONTENT = 70_000
#: On a PostgreSQL URL (the PostgreSQL campaign): short heartbeats, so dead runners are reaped
#: soon.
CLUSTER_TIMINGS = {"heartbeat_interval": 0.2, "runner_timeout": 1.0}


class Boom(Exception):
    """A fetch failure; its message carries a nonce so each one is unique."""


def record(log: TextIO, entry: dict[str, Any]) -> None:
    log.write(json.dumps(entry, ensure_ascii=False) + "\n")
    log.flush()
    os.fsync(log.fileno())


async def main(
    db: str, log: TextIO, run: str, rng: random.Random, synchronous: str, timeouts: bool
) -> None:
    async def fetch(target: Target) -> Result:
        await trio.sleep(rng.uniform(0, 0.004))
        nonce = rng.getrandbits(63)
        roll = rng.random()
        if roll < 0.15:
            message = f"boom {nonce}"
            record(log, {"url": target.url, "error": f"Boom: {message}"})
            raise Boom(message)
        content = f"{target.url} {nonce}"
        if roll > 1 - BIG_RESULTS:
            content += "x" * BIG_CONTENT
        meta = {"nonce": nonce, "roll": roll}
        record(log, {"url": target.url, "content": content, "meta": meta})
        return Result(content, meta)

    async def caller(runner: Runner, name: str) -> None:
        seq = 0
        while True:
            seq += 1
            targets = [
                Target(f"https://crash.test/{run}/{name}/{seq}/{i}")
                for i in range(rng.randint(1, 6))
            ]
            try:
                job_id, _ = await runner.submit(name, "user", targets)
            except BatchError:
                await trio.sleep(0.005)
                continue
            if rng.random() < 0.2:
                await trio.sleep(rng.uniform(0, 0.01))
                await runner.cancel(job_id)
            job = await runner.wait(job_id)
            # What the caller was told: once wait returns, nothing about the job may change.
            record(log, {"job": job_id, "waited": None if job is None else str(job.status)})

    config = Config(target_timeout=0.003, cancel_grace=0.001) if timeouts else Config()
    store: Store | JobStore
    if db.startswith("postgresql://"):  # one of several runners sharing the database
        config = dataclasses.replace(config, **CLUSTER_TIMINGS)
        store = open_store(db)
    else:
        store = Store.open(db, synchronous=synchronous)
    async with open_runner(store, fetch, config) as runner, trio.open_nursery() as nursery:
        for i in range(CALLERS):
            nursery.start_soon(caller, runner, f"caller{i}")
        print("up", flush=True)


if __name__ == "__main__":
    db_path, log_path, run_id, seed, sync, short = sys.argv[1:]
    with open(log_path, "a", encoding="utf-8") as side_log:
        trio.run(main, db_path, side_log, run_id, random.Random(int(seed)), sync, short == "1")
