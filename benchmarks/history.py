"""A database with a long history: many finished jobs, some lapsed, some still leased.

Built fast with raw ``executemany`` inside one transaction on a database created by
:meth:`trio_batch.Store.open` (so the schema and indexes are the store's), then checkpointed
so the whole history sits in the main file and can be copied as one file.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from .floor import EMPTY_RESULT, connect, create_db

#: Terminal statuses cycled through the history (mostly ``done``). None is live: a live job
#: in the history would count against the caps and be failed as "restart" on open.
_STATUSES = ("done", "done", "done", "done", "done", "done", "partial", "failed", "cancelled")
#: Distinct callers in the history.
_CALLERS = 1000
_DAY = 86400.0


def _job_id(j: int) -> str:
    # 22 URL-safe characters, like secrets.token_urlsafe(16), but reproducible.
    return hashlib.blake2b(str(j).encode(), digest_size=16).hexdigest()[:22]


def build_history(path: str, *, target_rows: int, targets_per_job: int = 32) -> int:
    """Create ``path`` holding about ``target_rows`` historical target rows; returns jobs made.

    Half the jobs have lapsed leases (``expires_at`` up to a day in the past), half are still
    leased (up to a day ahead); all are terminal, spread over 1,000 callers.
    """
    jobs = max(1, target_rows // targets_per_job)
    now = time.time()
    create_db(path)
    conn = connect(path)

    def job_rows() -> Iterator[tuple[object, ...]]:
        for j in range(jobs):
            status = _STATUSES[j % len(_STATUSES)]
            # Alternate lapsed and live leases, spread over a day either side of now.
            offset = (j / jobs) * _DAY
            expires = now - offset if j % 2 else now + offset + 60
            created = expires - _DAY
            failed = {"done": 0, "partial": 3, "failed": targets_per_job}.get(status, 0)
            done = 5 if status == "cancelled" else targets_per_job
            yield (
                _job_id(j),
                status,
                "cancelled by caller" if status == "cancelled" else None,
                targets_per_job,
                done,
                failed,
                f"history-{j % _CALLERS}",
                "bench",
                hashlib.sha256(f"key{j}".encode()).hexdigest(),
                created,
                expires - 60,
                expires,
            )

    def target_rows_of() -> Iterator[tuple[object, ...]]:
        for j in range(jobs):
            job_id = _job_id(j)
            status = _STATUSES[j % len(_STATUSES)]
            finished = now - (j / jobs) * _DAY
            for idx in range(targets_per_job):
                url = f"https://history.test/{j}/{idx}"
                if status == "cancelled" and idx >= 5:
                    yield (job_id, idx, url, "{}", "pending", None, None, None)
                elif status == "failed" or (status == "partial" and idx < 3):
                    yield (job_id, idx, url, "{}", "failed", None, "Boom: no", finished)
                else:
                    yield (job_id, idx, url, "{}", "done", EMPTY_RESULT, None, finished)

    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO jobs (id, status, error, targets_total, targets_done, targets_failed, "
            "caller, caller_class, idem_key, created_at, updated_at, expires_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            job_rows(),
        )
        conn.executemany(
            "INSERT INTO targets (job_id, idx, url, options, status, result, error, "
            "finished_at) VALUES (?,?,?,?,?,?,?,?)",
            target_rows_of(),
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return jobs


class HistoryCache:
    """Builds the history database once per run, then hands out fresh copies of it."""

    def __init__(self, directory: Path, *, target_rows: int) -> None:
        self.target_rows = target_rows
        self.source = directory / f"history-{target_rows}.db"
        self.build_seconds = 0.0
        self._copies = 0

    def copy(self) -> str:
        """A fresh copy of the history database (built on first use)."""
        if not self.source.exists():
            start = time.perf_counter()
            build_history(str(self.source), target_rows=self.target_rows)
            self.build_seconds = time.perf_counter() - start
        self._copies += 1
        dest = self.source.with_name(f"{self.source.stem}-copy{self._copies}.db")
        shutil.copyfile(self.source, dest)
        return str(dest)
