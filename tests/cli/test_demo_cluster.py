"""``make demo-cluster`` (demo/cluster.py) runs to its end and shows what it says it shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# make demo-cluster starts a throw-away PostgreSQL of its own: left out of make test-fast.
pytestmark = pytest.mark.postgres

DEMO = Path(__file__).resolve().parents[2] / "demo" / "cluster.py"


def test_demo_cluster_cancels_across_servers_and_reaps_a_killed_one() -> None:
    proc = subprocess.run(
        [sys.executable, str(DEMO)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reused=True" in proc.stdout
    assert "status cancelled" in proc.stdout
    assert "failed (error 'restart')" in proc.stdout
    assert (
        "B's own job, bob's: job" in proc.stdout
        and " done  targets: done done done done" in proc.stdout
    )
