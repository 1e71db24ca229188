"""A throw-away PgBouncer in transaction mode before a local PostgreSQL server (local_postgres).

Shared by the test suite (tests/support/pgbouncer.py) and the test suite's PgBouncer fixtures.
It runs Debian's ``/usr/sbin/pgbouncer`` on a free loopback port with ``pool_mode =
transaction``, as managed PostgreSQL's pooled URLs are. PgBouncer refuses to run as root: as
root it runs as ``postgres`` (``runuser -u postgres --``), like the server.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

from .local_postgres import PgServer

__all__ = ["BINARY", "PgBouncer", "PgBouncerError", "start_pgbouncer", "stop_pgbouncer"]

BINARY = "/usr/sbin/pgbouncer"


class PgBouncerError(Exception):
    """PgBouncer could not be started: no binary, or it did not come up."""


@dataclass
class PgBouncer:
    """A running PgBouncer: its port and its process."""

    port: int
    proc: subprocess.Popen[bytes]
    base: str

    def url(self, dbname: str) -> str:
        """A ``postgresql://`` URL of ``dbname`` through the pooler (TCP, 127.0.0.1)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def log_tail(self) -> str:
        with open(os.path.join(self.base, "log"), encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-30:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_pgbouncer(server: PgServer) -> PgBouncer:
    """Start a PgBouncer in transaction mode before ``server``; raise PgBouncerError if not up."""
    if not os.path.exists(BINARY):
        raise PgBouncerError(f"no {BINARY}: install Debian's pgbouncer package")
    base = tempfile.mkdtemp(prefix="tbpgb", dir="/tmp")
    os.chmod(base, 0o755)
    port = _free_port()
    config = os.path.join(base, "pgbouncer.ini")
    with open(config, "w") as f:
        f.write(
            "[databases]\n"
            f"* = host={server.socket_dir} user=postgres\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {port}\n"
            "unix_socket_dir =\n"
            "auth_type = any\n"
            "pool_mode = transaction\n"
            "max_client_conn = 500\n"
            "default_pool_size = 20\n"
            f"logfile = {base}/log\n"
            f"pidfile = {base}/pid\n"
            "ignore_startup_parameters = extra_float_digits\n"
        )
    open(os.path.join(base, "log"), "w").close()
    if os.geteuid() == 0:
        for path in (base, config, os.path.join(base, "log")):
            shutil.chown(path, user="postgres", group="postgres")
    cmd = [BINARY, config]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    bouncer = PgBouncer(port, proc, base)
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return bouncer
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = bouncer.log_tail()
            stop_pgbouncer(bouncer)
            raise PgBouncerError(f"PgBouncer did not start:\n{tail}")
        time.sleep(0.05)


def stop_pgbouncer(bouncer: PgBouncer) -> None:
    """Stop it (SIGTERM, then SIGKILL) and remove its folder."""
    if bouncer.proc.poll() is None:
        bouncer.proc.terminate()
        try:
            bouncer.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            bouncer.proc.kill()
            bouncer.proc.wait()
    shutil.rmtree(bouncer.base, ignore_errors=True)
