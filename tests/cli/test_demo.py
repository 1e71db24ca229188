"""``make demo`` (demo/demo.py) runs from a clean state and shows the reuse."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "demo" / "demo.py"


def test_demo_runs_and_reuses(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TRIO_BATCH_DB", "COLUMNS")}
    proc = subprocess.run(
        [sys.executable, str(DEMO), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "10 done, 2 failed, 0 not fetched" in proc.stdout
    assert "nothing was fetched" in proc.stderr
    assert "Lamps replaced: 14. Total cost: 2300 EUR." in proc.stdout
    assert "pier-1 is dark" in proc.stdout
    assert (tmp_path / "demo.db").exists()  # kept for exploring
