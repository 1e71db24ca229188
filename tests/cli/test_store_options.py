"""``--store-timeout`` and ``--listen-db`` on ``trio-batch run`` (and ``serve``): a pooled
PostgreSQL URL beside a direct one for LISTEN, and bad values refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

from ..support.local_server import LocalServer, server  # noqa: F401 (a fixture)
from .test_cli import cli, write_batch


def test_run_through_pgbouncer_with_a_direct_listen_db(
    server: LocalServer,  # noqa: F811
    tmp_path: Path,
    pooled_dsn: str,
    pg_dsn: str,
) -> None:
    batch = write_batch(
        tmp_path / "b.txt", [server.url("/page.html"), server.url("/page.html?x=2")]
    )
    proc = cli(
        "run", str(batch), "--db", pooled_dsn, "--listen-db", pg_dsn,
        "--store-timeout", "3", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["job"]["status"] == "done"
    assert [t["status"] for t in out["targets"]] == ["done", "done"]
    assert "prepared statement" not in proc.stderr


def test_listen_db_with_sqlite_and_a_bad_store_timeout_are_refused(tmp_path: Path) -> None:
    batch = write_batch(tmp_path / "b.txt", ["https://example.test/"])
    db = str(tmp_path / "x.db")
    refused = cli("run", str(batch), "--db", db, "--listen-db", "postgresql://u@h/db")
    assert refused.returncode == 2 and "listen_url is for PostgreSQL" in refused.stderr
    for bad in ("0", "-1", "nan", "soon"):
        proc = cli("run", str(batch), "--db", db, "--store-timeout", bad)
        assert proc.returncode == 2 and "positive number of seconds" in proc.stderr, bad
        proc = cli("serve", "--db", db, "--caller-header", "X-C", "--store-timeout", bad)
        assert proc.returncode == 2 and "positive number of seconds" in proc.stderr, bad
