"""A throw-away local PostgreSQL server: ``initdb`` and ``pg_ctl`` on a temporary folder.

Shared by ``make demo-cluster`` (demo/cluster.py) and the test suite (tests/pg_server.py).
It uses the machine's PostgreSQL server binaries (Debian's, under
``/usr/lib/postgresql/<major>/bin``): Unix socket only (no TCP port), durability off (``fsync``,
``synchronous_commit``, ``full_page_writes``): fast, and for throw-away data only. PostgreSQL
refuses to run as root, so as root every command runs as the ``postgres`` user (``runuser -u
postgres --``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

__all__ = ["BIN_GLOB", "PgServer", "PgServerError", "find_bin_dir", "start_postgres"]

#: Where Debian installs each major version's server binaries.
BIN_GLOB = "/usr/lib/postgresql/*/bin"


class PgServerError(Exception):
    """The local server could not be started: no binaries, or initdb/pg_ctl failed."""


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
    base: str  # owns everything below; removed by destroy()
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

    def destroy(self) -> None:
        """Stop the server if it runs, and remove its folder."""
        # Already down (stopped by a test)? The folder goes anyway.
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """Create the empty database ``name`` (a generated, safe name); its URL."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

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


def start_postgres() -> PgServer:
    """Create and start a server in a new temporary folder; :meth:`PgServer.destroy` it.

    Raises :class:`PgServerError` (with the end of the server's log) if it cannot start.
    """
    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise PgServerError(
            f"no PostgreSQL server binaries ({BIN_GLOB}/initdb): install Debian's postgresql "
            "package"
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
    try:
        server.run("initdb", "-A", "trust", "-U", "postgres", "--no-sync", "-D", server.data_dir)
        server.start()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        tail = server.log_tail()
        shutil.rmtree(base, ignore_errors=True)
        raise PgServerError(f"the local PostgreSQL server did not start: {exc}\n{tail}") from exc
    return server
