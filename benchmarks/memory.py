"""Peak RSS of a process that has run N targets through the runner, one job after another.

Each figure comes from a fresh subprocess (``python -m benchmarks.memory PATH N``) that runs
the serial workload and prints its peak resident set size from ``resource.getrusage``.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from .workloads import measure_serial

REPO = Path(__file__).resolve().parent.parent


def peak_rss_bytes() -> int:
    """This process's peak RSS in bytes (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure_rss(path: str, *, targets: int, targets_per_job: int = 32) -> int:
    """Peak RSS, in bytes, of a fresh process after running ``targets`` targets."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", path, str(targets), str(targets_per_job)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(json.loads(out.strip().splitlines()[-1])["peak_rss_bytes"])


def main(argv: list[str]) -> None:
    path, targets, per_job = argv[0], int(argv[1]), int(argv[2])
    jobs = max(1, targets // per_job)
    rate = measure_serial(path, jobs=jobs, targets_per_job=per_job, tag="m")
    print(
        json.dumps(
            {"targets": jobs * per_job, "targets_per_s": rate, "peak_rss_bytes": peak_rss_bytes()}
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
