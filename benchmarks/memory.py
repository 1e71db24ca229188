"""Peak RSS of a process that has run N targets through the runner, one job after another.

Each figure comes from a fresh subprocess (``python -m benchmarks.memory PATH N``) that runs
the serial workload and prints its peak resident set size from ``resource.getrusage``, and the
size of the database's WAL file just before the runner closes (SQLite's wal-index, mapped into
the process, grows with the WAL).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import trio

from trio_batch import JobState, Store, open_runner

from .workloads import job_targets, noop_fetch

REPO = Path(__file__).resolve().parent.parent


def peak_rss_bytes() -> int:
    """This process's peak RSS in bytes (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _wal_size(path: str) -> int:
    wal = f"{path}-wal"
    return os.path.getsize(wal) if os.path.exists(wal) else 0


def run_serial(path: str, *, jobs: int, targets_per_job: int) -> int:
    """Run ``jobs`` jobs one after another; return the WAL file's size before closing."""
    store = Store.open(path)

    async def main() -> int:
        async with open_runner(store, noop_fetch) as runner:
            for j in range(jobs):
                job_id, _ = await runner.submit(
                    "memory", "bench", job_targets(f"m{j}", targets_per_job)
                )
                job = await runner.wait(job_id)
                assert job is not None and job.status is JobState.DONE
            return _wal_size(path)

    try:
        return trio.run(main)
    finally:
        store.close()


def measure_rss(path: str, *, targets: int, targets_per_job: int = 32) -> dict[str, int]:
    """Peak RSS and WAL size, in bytes, of a fresh process after running ``targets`` targets."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", path, str(targets), str(targets_per_job)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    return {"peak_rss_bytes": int(got["peak_rss_bytes"]), "wal_bytes": int(got["wal_bytes"])}


def main(argv: list[str]) -> None:
    path, targets, per_job = argv[0], int(argv[1]), int(argv[2])
    jobs = max(1, targets // per_job)
    wal = run_serial(path, jobs=jobs, targets_per_job=per_job)
    print(
        json.dumps(
            {"targets": jobs * per_job, "peak_rss_bytes": peak_rss_bytes(), "wal_bytes": wal}
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
