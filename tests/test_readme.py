"""The README's embedding example runs as printed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_example_runs(tmp_path: Path) -> None:
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    proc = subprocess.run(
        [sys.executable, "-c", block.group(1)],
        cwd=tmp_path,  # its jobs.db lands here
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("done (Job(")
    assert (tmp_path / "jobs.db").exists()
