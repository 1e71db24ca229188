"""A database trio_batch refuses (a newer schema version, or another program's) is left exactly
as it was: the same bytes, the same journal mode, no file added or removed beside it.

SQLite's ``journal_mode=WAL`` is written into the file's header, so it must not run before the
refusal. Each way in is checked on real files: :meth:`Store.open` (with and without
``create``), :func:`open_store` (the one ``trio-batch serve`` and the command line use), a
read-only command, ``serve`` itself, and :meth:`Store.reopen`. On PostgreSQL, the database's
whole dump (``pg_dump``: schema and rows) is compared before and after.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from trio_batch import SCHEMA_VERSION, SchemaVersionError, Store, StoreError, open_store
from trio_batch.store.postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION
from trio_batch.store.postgres import PostgresJobStore, PostgresStore
from trio_batch.store.sqlite._schema import TABLES

from ..support.cli_runner import run_cli
from ..support.pg_server import PgServer

#: (the file's SHA-256, its journal mode, the names in its folder)
State = tuple[str, str, list[str]]


def _state(path: Path) -> State:
    """The file's bytes and its folder's names first: reading the journal mode of a WAL file
    makes -wal and -shm files for as long as the connection is open."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    names = sorted(os.listdir(path.parent))
    with contextlib.closing(sqlite3.connect(path)) as conn:
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    return digest, mode, names


def _sqlite(path: Path, *statements: str) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for statement in statements:
            conn.execute(statement)


def _foreign(path: Path) -> None:
    """Another program's database, in SQLite's default rollback-journal mode."""
    _sqlite(
        path,
        "CREATE TABLE jobs (name TEXT, every TEXT)",
        "CREATE TABLE targets (host TEXT)",
        "INSERT INTO jobs VALUES ('backup', 'daily')",
    )


def _foreign_outbox(path: Path) -> None:
    """Another program's database with a table of a name a later migration of ours makes: its
    creation would fail, but only after the file had been switched to WAL."""
    _sqlite(path, "CREATE TABLE outbox (event TEXT)", "INSERT INTO outbox VALUES ('sent')")


def _newer(path: Path, journal_mode: str) -> None:
    """One of ours, as a later trio_batch would leave it: a newer version, in ``journal_mode``."""
    Store.open(path).close()
    _sqlite(
        path, f"PRAGMA journal_mode={journal_mode}", f"PRAGMA user_version={SCHEMA_VERSION + 1:d}"
    )


DATABASES: dict[str, tuple[Callable[[Path], None], str, str]] = {
    # name: (how it is made, its journal mode, the refusal's words)
    "foreign-rollback": (_foreign, "delete", "not a trio_batch database"),
    "foreign-outbox": (_foreign_outbox, "delete", "has a 'outbox' table"),
    "newer-rollback": (lambda p: _newer(p, "DELETE"), "delete", "newer than"),
    "newer-wal": (lambda p: _newer(p, "WAL"), "wal", "newer than"),
}


def _store_open(path: Path) -> None:
    Store.open(path).close()


def _store_open_existing(path: Path) -> None:
    Store.open(path, create=False).close()


def _open_store(path: Path) -> None:
    trio.run(open_store(str(path)).aclose)


OPENERS: dict[str, Callable[[Path], None]] = {
    "Store.open": _store_open,
    "Store.open(create=False)": _store_open_existing,
    "open_store": _open_store,
}


@pytest.mark.parametrize("opener", OPENERS)
@pytest.mark.parametrize("database", DATABASES)
def test_a_refused_sqlite_database_is_left_as_it_was(
    tmp_path: Path, database: str, opener: str
) -> None:
    make, journal_mode, words = DATABASES[database]
    path = tmp_path / "refused.db"
    make(path)
    before = _state(path)
    assert (before[1], before[2]) == (journal_mode, ["refused.db"])
    with pytest.raises(SchemaVersionError, match=words):
        OPENERS[opener](path)
    assert _state(path) == before


ACCEPTED: dict[str, Callable[[Path], None]] = {
    "no file": lambda p: None,
    "an empty file": lambda p: p.write_bytes(b""),
    "tables of other names": lambda p: _sqlite(p, "CREATE TABLE notes (text TEXT)"),
}


@pytest.mark.parametrize("database", ACCEPTED)
def test_what_is_not_refused_is_created_at_the_current_version_in_wal(
    tmp_path: Path, database: str
) -> None:
    # The check before the pragmas refuses only what it must: the rest is switched to WAL and
    # given the schema, as before.
    path = tmp_path / "jobs.db"
    ACCEPTED[database](path)
    Store.open(path).close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


def test_every_table_of_a_new_store_marks_a_database_as_ours(tmp_path: Path) -> None:
    # A table a migration adds but TABLES forgets would let another program's table of that
    # name through the check, to fail the migration after the switch to WAL.
    path = tmp_path / "new.db"
    Store.open(path).close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert sorted(name for (name,) in rows) == sorted(TABLES)


def test_a_file_that_is_not_a_database_is_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"not a database, but somebody's notes\n" * 200)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    for opener in OPENERS.values():
        with pytest.raises(StoreError, match="not a database"):
            opener(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert os.listdir(tmp_path) == ["notes.db"]


#: Commands that open a store: a read-only one, and the service (refused at its start, it
#: exits rather than serving).
COMMANDS = {
    "jobs": ["jobs"],
    "serve": ["serve", "--caller-header", "X-Caller", "--bind", "127.0.0.1:0"],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("database", DATABASES)
def test_a_command_leaves_a_refused_database_as_it_was(
    tmp_path: Path, database: str, command: str
) -> None:
    make, _, words = DATABASES[database]
    path = tmp_path / "refused.db"
    make(path)
    before = _state(path)
    env = {k: v for k, v in os.environ.items() if k != "TRIO_BATCH_DB"}
    done = run_cli([*COMMANDS[command], "--db", str(path)], stdin=None, env=env)
    assert done.returncode != 0 and words in done.stderr, done.stderr
    assert _state(path) == before


def test_a_reopen_refused_by_a_newer_version_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with Store.open(path) as store:
        # A later trio_batch migrates the file while this store has it open.
        _sqlite(path, f"PRAGMA user_version={SCHEMA_VERSION + 1:d}", "PRAGMA wal_checkpoint")
        before = _state(path)
        with pytest.raises(SchemaVersionError, match="newer than"):
            store.reopen()
        assert _state(path) == before


# ------------------------------------------------------------------------------------------
# PostgreSQL


def _dump(pg_server: PgServer, dsn: str) -> str:
    """The database's schema and rows, as ``pg_dump`` writes them (no random restrict key)."""
    done = subprocess.run(
        [os.path.join(pg_server.bin_dir, "pg_dump"), "--no-owner", "--dbname", dsn],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return "\n".join(
        line
        for line in done.stdout.splitlines()
        if not line.startswith(("\\restrict", "\\unrestrict"))
    )


def _pg_newer(dsn: str) -> None:
    import psycopg

    PostgresStore.open(dsn).close(final=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE trio_batch_schema SET version = %s", (PG_SCHEMA_VERSION + 1,))


def _pg_foreign(dsn: str) -> None:
    """Another program's table where one of ours would go (``runners``), with a row."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE runners (name text)")
        conn.execute("INSERT INTO runners VALUES ('cron')")


def _pg_foreign_outbox(dsn: str) -> None:
    """Another program's table of a name a later version of ours makes: the migration fails on
    it, and its transaction (DDL included) is rolled back."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE outbox (event text)")
        conn.execute("INSERT INTO outbox VALUES ('sent')")


PG_DATABASES: dict[str, tuple[Callable[[str], None], type[StoreError], str]] = {
    # name: (how it is made, the refusal, its words)
    "newer": (_pg_newer, SchemaVersionError, "newer than"),
    "foreign": (_pg_foreign, SchemaVersionError, "not a trio_batch database"),
    "foreign-outbox": (_pg_foreign_outbox, StoreError, "already exists"),
}


def _pg_store_open(dsn: str) -> None:
    PostgresStore.open(dsn).close(final=True)


def _pg_open_store(dsn: str) -> None:
    trio.run(open_store(dsn).aclose)


PG_OPENERS: dict[str, Callable[[str], None]] = {
    "PostgresStore.open": _pg_store_open,
    "PostgresJobStore.open": lambda dsn: trio.run(PostgresJobStore.open(dsn).aclose),
    "open_store": _pg_open_store,
}


@pytest.mark.parametrize("opener", PG_OPENERS)
@pytest.mark.parametrize("database", PG_DATABASES)
def test_a_refused_postgres_database_is_left_as_it_was(
    pg_server: PgServer, pg_dsn: str, database: str, opener: str
) -> None:
    make, refusal, words = PG_DATABASES[database]
    make(pg_dsn)
    before = _dump(pg_server, pg_dsn)
    assert "CREATE TABLE" in before  # a dump of something: the comparison can fail
    with pytest.raises(refusal, match=words):
        PG_OPENERS[opener](pg_dsn)
    assert _dump(pg_server, pg_dsn) == before
