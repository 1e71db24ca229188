"""A throw-away PgBouncer in transaction mode in front of the test PostgreSQL server.

``pgbouncer`` (session-scoped) starts one with :func:`demo.local_pgbouncer.start_pgbouncer`
(Debian's ``/usr/sbin/pgbouncer``, ``pool_mode = transaction``, as managed PostgreSQL's pooled
URLs are: a client's transactions go to whichever server connection is free, so nothing may
outlive a transaction). ``pooled_dsn`` is the test's own database through it.

A missing binary or a PgBouncer that does not start FAILS the tests that need it; they never
skip (``.ci/run`` installs Debian's ``pgbouncer`` package through scripts/system-packages).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest

from demo.local_pgbouncer import PgBouncer, PgBouncerError, start_pgbouncer, stop_pgbouncer

from .markers import require_marker
from .pg_server import PgServer

__all__ = ["PgBouncer", "pgbouncer", "pooled_dsn"]


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


@pytest.fixture
def pooled_dsn(pg_dsn: str, pgbouncer: PgBouncer, request: pytest.FixtureRequest) -> str:
    """The test's own database (``pg_dsn``) through the pooler."""
    require_marker(request, "pgbouncer")
    dbname = urllib.parse.urlsplit(pg_dsn).path.lstrip("/")
    return pgbouncer.url(dbname)
