"""``trio-batch`` commands on a PostgreSQL URL (``--db`` and ``$TRIO_BATCH_DB``), for real."""

from __future__ import annotations

import json
from pathlib import Path

from ..support.local_server import LocalServer, server
from .test_cli import _env, cli, write_batch

__all__ = ["server"]  # the fixture, imported for pytest


def test_run_jobs_and_status_take_a_postgresql_url(
    server: LocalServer, tmp_path: Path, pg_dsn: str
) -> None:
    batch = write_batch(tmp_path / "urls.txt", [server.url("/text.txt")])
    run = cli("run", str(batch), "--db", pg_dsn, "--quiet")
    assert run.returncode == 0, run.stderr
    listed = cli("jobs", "--db", pg_dsn, "--json")
    assert listed.returncode == 0, listed.stderr
    (job,) = json.loads(listed.stdout)
    assert job["status"] == "done"
    # The same database through the environment; no file of that name is looked for.
    status = cli("status", job["id"], env=_env(TRIO_BATCH_DB=pg_dsn))
    assert status.returncode == 0, status.stderr
    assert job["id"] in status.stdout
