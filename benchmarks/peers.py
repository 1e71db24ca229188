"""What a user might pick instead, on the same work: Huey (SqliteHuey) and DBOS Transact.

Both need the optional ``bench`` extra; a peer that is not installed is skipped with a message.
Each measurement runs in a fresh subprocess (``python -m benchmarks.peers NAME N DIR``) that
prints one JSON line, so neither library's global state (DBOS is a singleton, Huey's consumer
installs signal handlers) leaks into the rest of the run.

Fairness: both run on a file database in WAL mode with ``synchronous=NORMAL``, as trio_batch's
store does by default.

- Huey: ``SqliteHuey`` already opens its database in WAL; its ``fsync`` switch only knows FULL or
  OFF, so a storage subclass sets ``PRAGMA synchronous=NORMAL`` on every connection it opens.
  N no-op tasks returning a value (so a result is stored) are enqueued first; the timer runs
  from the start of a real consumer (one worker thread, not ``immediate`` mode) until the Nth
  task has signalled ``complete``, which Huey emits after storing the result.
- DBOS: the SQLite system database file is switched to WAL (a persistent setting) before DBOS
  opens it, and a SQLAlchemy ``connect`` listener sets ``synchronous=NORMAL`` on every
  connection; DBOS's own settings (``IMMEDIATE`` transactions, busy timeout) are untouched.
  The timer covers one workflow call that runs N no-op steps, each checkpointed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

#: Each peer and the module it needs.
PEERS = {"huey": "huey", "dbos": "dbos"}


@dataclass(frozen=True, slots=True)
class PeerRun:
    """One peer measurement."""

    system: str
    items: int
    items_per_s: float
    journal_mode: str
    synchronous: int  # 1 is NORMAL


def installed(peer: str) -> bool:
    """True if the peer's package can be imported here."""
    return importlib.util.find_spec(PEERS[peer]) is not None


def measure_peer(peer: str, *, items: int, directory: Path, timeout: float = 300.0) -> PeerRun:
    """Run one peer measurement in a fresh subprocess."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.peers", peer, str(items), str(directory)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=timeout,
    ).stdout
    return PeerRun(**json.loads(out.strip().splitlines()[-1]))


# ---------------------------------------------------------------------------------------------
# In the subprocess


def _pragmas(conn: Any) -> tuple[str, int]:
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    return str(mode), int(sync)


def run_huey(items: int, directory: Path) -> PeerRun:
    from huey import SqliteHuey, signals
    from huey.consumer import Consumer
    from huey.storage import SqliteStorage

    class NormalSyncStorage(SqliteStorage):  # type: ignore[misc]
        def _create_connection(self) -> sqlite3.Connection:
            conn: sqlite3.Connection = super()._create_connection()
            conn.execute("PRAGMA synchronous=NORMAL")
            return conn

    path = directory / f"huey-{uuid.uuid4().hex}.db"
    huey = SqliteHuey("bench", filename=str(path), storage_class=NormalSyncStorage)

    @huey.task()
    def noop(i: int) -> int:
        return i

    completed = 0
    all_done = threading.Event()

    @huey.signal(signals.SIGNAL_COMPLETE)
    def on_complete(signal: str, task: object, *args: object) -> None:
        nonlocal completed
        completed += 1
        if completed == items:
            all_done.set()

    for i in range(items):
        noop(i)
    consumer = Consumer(huey, workers=1, worker_type="thread", periodic=False)
    start = time.perf_counter()
    consumer.start()
    if not all_done.wait(timeout=600):
        raise RuntimeError(f"Huey completed only {completed} of {items} tasks")
    elapsed = time.perf_counter() - start
    consumer.stop(graceful=True)
    stored = huey.storage.result_store_size()
    if stored != items:
        raise RuntimeError(f"Huey stored {stored} results for {items} tasks")
    mode, sync = _pragmas(huey.storage.conn)
    return PeerRun("huey", items, items / elapsed, mode, sync)


def run_dbos(items: int, directory: Path) -> PeerRun:
    import sqlalchemy as sa
    from dbos import DBOS

    path = directory / f"dbos-{uuid.uuid4().hex}.sqlite"
    with sqlite3.connect(path) as conn:  # WAL is a property of the file: set it up front
        conn.execute("PRAGMA journal_mode=WAL")
    conn.close()

    @sa.event.listens_for(sa.engine.Engine, "connect")
    def normal_sync(dbapi_conn: Any, record: Any) -> None:
        if isinstance(dbapi_conn, sqlite3.Connection):
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    @DBOS.step()
    def noop_step(i: int) -> int:
        return i

    @DBOS.workflow()
    def workflow(n: int) -> int:
        for i in range(n):
            noop_step(i)
        return n

    DBOS(
        config={
            "name": "trio-batch-bench",
            "system_database_url": f"sqlite:///{path}",
            "log_level": "WARNING",
        }
    )
    try:
        DBOS.launch()
        start = time.perf_counter()
        done = workflow(items)
        elapsed = time.perf_counter() - start
        if done != items:
            raise RuntimeError(f"DBOS workflow returned {done}, not {items}")
        engine = sa.create_engine(f"sqlite:///{path}")
        with engine.connect() as check:
            raw = check.connection.dbapi_connection
            mode, sync = _pragmas(raw)
            steps = check.execute(sa.text("SELECT count(*) FROM operation_outputs")).scalar_one()
        engine.dispose()
        if steps != items:
            raise RuntimeError(f"DBOS recorded {steps} steps for {items}")
    finally:
        DBOS.destroy()
    return PeerRun("dbos", items, items / elapsed, mode, sync)


def main(argv: list[str]) -> None:
    peer, items, directory = argv[0], int(argv[1]), Path(argv[2])
    run = {"huey": run_huey, "dbos": run_dbos}[peer](items, directory)
    print(json.dumps(dataclasses.asdict(run)))


if __name__ == "__main__":
    main(sys.argv[1:])
