"""Another process holding an SQLite database's write lock (``BEGIN IMMEDIATE``) until told."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

#: Run as ``python -c LOCKER <database>``: prints "locked" once it holds the write lock, and
#: rolls back (writing nothing) when a line arrives on its stdin.
LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


@contextlib.contextmanager
def locked_by_another_process(path: Path) -> Iterator[None]:
    """Hold ``path``'s write lock in a second process for the block (synchronous tests)."""
    with subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as locker:
        assert locker.stdin is not None and locker.stdout is not None
        try:
            assert locker.stdout.readline().strip() == "locked"
            yield
        finally:
            locker.stdin.write("\n")
            locker.stdin.flush()
            assert locker.wait() == 0
