"""A throw-away PostgreSQL server for the tests, and a fresh database per test.

``pg_server`` (session-scoped) starts one with :func:`demo.local_postgres.start_postgres`
(``initdb`` and ``pg_ctl`` on a temporary folder, Unix socket only, durability off; shared with
``make demo-cluster``) and stops it with ``pg_ctl stop -m immediate`` at the end of the session.

Missing binaries or a server that does not start FAIL the tests that need it; they never skip:
CI must run the PostgreSQL suites (``.ci/run`` installs Debian's ``postgresql`` package).

``pg_dsn`` gives each test a database of its own, created from ``template0`` (empty, fast).
"""

from __future__ import annotations

import itertools
import os
import urllib.parse
from collections.abc import Iterator

import pytest

from demo.local_postgres import PgServer, PgServerError, start_postgres

from .cuttable_proxy import CuttableProxy
from .markers import require_marker

__all__ = ["PgServer", "pg_dsn", "pg_server"]

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A PostgreSQL server for the whole session; fails (never skips) if it cannot start."""
    try:
        server = start_postgres()
    except PgServerError as exc:
        pytest.fail(f"{exc} (the PostgreSQL tests must run, not skip)", pytrace=False)
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def pg_dsn(pg_server: PgServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A ``postgresql://`` URL of a fresh, empty database of this test's own, dropped after."""
    import psycopg

    require_marker(request, "postgres")

    name = f"t{os.getpid()}_{next(_databases)}"  # a generated name: safe to quote in SQL
    url = pg_server.create_database(name)
    yield url
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_proxy(pg_server: PgServer, request: pytest.FixtureRequest) -> Iterator[CuttableProxy]:
    """A TCP proxy before the test server's Unix socket, to cut, hold or release."""
    require_marker(request, "postgres")
    with CuttableProxy(f"{pg_server.socket_dir}/.s.PGSQL.5432") as proxy:
        yield proxy


def through(proxy: CuttableProxy, dsn: str) -> str:
    """The URL of ``dsn``'s database reached through ``proxy``."""
    dbname = urllib.parse.urlsplit(dsn).path.lstrip("/")
    return f"postgresql://postgres@127.0.0.1:{proxy.port}/{dbname}"
