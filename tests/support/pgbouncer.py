"""A throw-away PgBouncer in transaction mode in front of the test PostgreSQL server.

``pgbouncer`` (session-scoped) starts one with :func:`demo.local_pgbouncer.start_pgbouncer`
(Debian's ``/usr/sbin/pgbouncer``, ``pool_mode = transaction``, as managed PostgreSQL's pooled
URLs are: a client's transactions go to whichever server connection is free, so nothing may
outlive a transaction). ``pooled_dsn`` is the test's own database through it.

A missing binary or a PgBouncer that does not start FAILS the tests that need it; they never
skip (``.ci/run`` installs Debian's ``pgbouncer`` package through scripts/system-packages).

Every test through it checks the pooler's log (:func:`not_linked`): a line "got packet from
server when not linked" means a server connection sent something no client asked for, as one
that ran ``LISTEN`` does when a notification comes while it serves nobody; that notification
was dropped. ``pooled_dsn`` fails its test on any such line logged while it ran.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator

import pytest

from demo.local_pgbouncer import PgBouncer, PgBouncerError, start_pgbouncer, stop_pgbouncer

from .markers import require_marker
from .pg_server import PgServer

__all__ = ["NOT_LINKED", "PgBouncer", "log_size", "not_linked", "pgbouncer", "pooled_dsn"]

#: What PgBouncer logs when a server connection sends what no client asked for.
NOT_LINKED = "when not linked"


@pytest.fixture(scope="session")
def pgbouncer(pg_server: PgServer) -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode for the session; fails (never skips) if it cannot."""
    try:
        bouncer = start_pgbouncer(pg_server)
    except PgBouncerError as exc:
        pytest.fail(f"{exc} (the PgBouncer tests must run, not skip)", pytrace=False)
    try:
        yield bouncer
    finally:
        stop_pgbouncer(bouncer)


def _log_path(bouncer: PgBouncer) -> str:
    return os.path.join(bouncer.base, "log")


def log_size(bouncer: PgBouncer) -> int:
    """Where the pooler's log ends now (its size in bytes)."""
    return os.path.getsize(_log_path(bouncer))


def not_linked(bouncer: PgBouncer, since: int) -> list[str]:
    """The pooler's log lines after byte ``since`` (see :func:`log_size`) that say a server
    connection sent something while linked to no client."""
    with open(_log_path(bouncer), "rb") as f:
        f.seek(since)
        text = f.read().decode("utf-8", "replace")
    return [line for line in text.splitlines() if NOT_LINKED in line]


@pytest.fixture
def pooled_dsn(pg_dsn: str, pgbouncer: PgBouncer, request: pytest.FixtureRequest) -> Iterator[str]:
    """The test's own database (``pg_dsn``) through the pooler; fails the test if the pooler
    logs a "when not linked" line meanwhile."""
    require_marker(request, "pgbouncer")
    dbname = urllib.parse.urlsplit(pg_dsn).path.lstrip("/")
    since = log_size(pgbouncer)
    yield pgbouncer.url(dbname)
    assert not_linked(pgbouncer, since) == []
