"""A throw-away PostgreSQL server for the tests, and a fresh database per test.

``pg_server`` (session-scoped) runs ``initdb`` and ``pg_ctl`` from the machine's PostgreSQL
binaries (Debian's, under ``/usr/lib/postgresql/<major>/bin``) on a temporary folder: Unix
socket only, durability off (``fsync``, ``synchronous_commit``, ``full_page_writes``), stopped
with ``pg_ctl stop -m immediate`` at the end of the session. PostgreSQL refuses to run as root,
so as root every command runs as the ``postgres`` user (``runuser -u postgres --``).

Missing binaries or a server that does not start FAIL the tests that need it; they never skip:
CI must run the PostgreSQL suites (``.ci/run`` installs Debian's ``postgresql`` package).

``pg_dsn`` gives each test a database of its own, created from ``template0`` (empty, fast).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

__all__ = ["PgServer", "pg_dsn", "pg_server"]

#: Where Debian installs each major version's server binaries.
BIN_GLOB = "/usr/lib/postgresql/*/bin"

_databases = itertools.count(1)


def find_bin_dir() -> str | None:
    """The newest PostgreSQL server binaries on this machine, or None."""
    dirs = [d for d in glob.glob(BIN_GLOB) if os.path.exists(os.path.join(d, "initdb"))]
    if not dirs:
        return None
    return max(dirs, key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0)


@dataclass
class PgServer:
    """A running throw-away server: its folders, and how to run commands against it."""

    bin_dir: str
    base: str  # owns everything below; removed at the end
    data_dir: str
    socket_dir: str
    log_file: str

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq keyword DSN for ``dbname`` over the Unix socket, as the ``postgres`` user."""
        return f"host={self.socket_dir} user=postgres dbname={dbname}"

    def url(self, dbname: str) -> str:
        """The same as a ``postgresql://`` URL (the socket folder as the ``host`` parameter)."""
        return f"postgresql://postgres@/{dbname}?host={self.socket_dir}"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a server binary (as ``postgres`` when we are root); raise if it fails."""
        cmd = [os.path.join(self.bin_dir, args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        # No captured pipes for pg_ctl: the postmaster inherits them and would hold them open.
        return subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            text=True,
            timeout=120,
        )

    def start(self) -> None:
        """``pg_ctl start`` and wait until it accepts connections."""
        options = (
            f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self.run("pg_ctl", "-w", "-D", self.data_dir, "-l", self.log_file, "-o", options, "start")

    def stop(self, mode: str = "immediate") -> None:
        """``pg_ctl stop -m mode``."""
        self.run("pg_ctl", "-w", "-D", self.data_dir, "-m", mode, "stop")

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's log, for a failure message."""
        try:
            with open(self.log_file, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as exc:
            return f"(no log: {exc})"


def _chown_to_postgres(path: str) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, user="postgres", group="postgres")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A PostgreSQL server for the whole session; fails (never skips) if it cannot start."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.fail(
            f"no PostgreSQL server binaries ({BIN_GLOB}/initdb): install Debian's postgresql "
            "package (.ci/run does); the PostgreSQL tests must run, not skip",
            pytrace=False,
        )
    # A short path: a Unix socket's path is limited to about 107 bytes.
    base = tempfile.mkdtemp(prefix="tbpg", dir="/tmp")
    os.chmod(base, 0o755)
    server = PgServer(
        bin_dir=bin_dir,
        base=base,
        data_dir=os.path.join(base, "data"),
        socket_dir=os.path.join(base, "s"),
        log_file=os.path.join(base, "log"),
    )
    for path in (server.data_dir, server.socket_dir):
        os.mkdir(path, 0o700)
        _chown_to_postgres(path)
    open(server.log_file, "w").close()
    _chown_to_postgres(server.log_file)
    started = False
    try:
        server.run("initdb", "-A", "trust", "-U", "postgres", "--no-sync", "-D", server.data_dir)
        server.start()
        started = True
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        tail = server.log_tail()
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"the test PostgreSQL server did not start: {exc}\n{tail}", pytrace=False)
    try:
        yield server
    finally:
        if started:
            # Already down (a test stopped it)? The folder goes anyway.
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> Iterator[str]:
    """A ``postgresql://`` URL of a fresh, empty database of this test's own, dropped after."""
    import psycopg

    name = f"t{os.getpid()}_{next(_databases)}"  # a generated name: safe to quote in SQL
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    yield pg_server.url(name)
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
