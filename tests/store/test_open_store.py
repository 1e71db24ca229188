"""``open_store``: which backend a path or URL opens, and the errors for those it cannot."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trio_batch import SQLiteJobStore, StoreError, open_store


async def _opened(target: str | Path) -> SQLiteJobStore:
    store = open_store(target)
    assert isinstance(store, SQLiteJobStore)
    return store


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("{dir}/plain.db", "{dir}/plain.db"),
        ("sqlite:{dir}/bare.db", "{dir}/bare.db"),
        ("sqlite:///{dir}/three.db", "{dir}/three.db"),
    ],
)
async def test_paths_and_sqlite_urls_open_that_file(
    tmp_path: Path, url: str, expected: str
) -> None:
    # tmp_path is absolute, so "{dir}" starts with "/": sqlite:///{dir} has four slashes, the
    # SQLAlchemy form of an absolute path (sqlite:///name.db is relative).
    store = await _opened(url.format(dir=tmp_path))
    try:
        assert store.location == expected.format(dir=tmp_path)
        assert Path(store.location).exists()  # noqa: ASYNC240 - a test's own check
    finally:
        await store.aclose()


async def test_a_relative_sqlite_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = await _opened("sqlite:///rel.db")
    try:
        assert store.location == "rel.db"
        assert (tmp_path / "rel.db").exists()
    finally:
        await store.aclose()


@pytest.mark.parametrize("url", [":memory:", "sqlite://", "sqlite:///:memory:"])
async def test_memory_forms_open_a_private_database(url: str) -> None:
    store = await _opened(url)
    try:
        assert store.store.is_memory
    finally:
        await store.aclose()


async def test_sqlite_url_parameters_set_the_store_options(tmp_path: Path) -> None:
    store = await _opened(f"sqlite:///{tmp_path}/p.db?synchronous=full&busy_timeout=2.5")
    try:
        assert (store.store.synchronous, store.store.busy_timeout) == ("FULL", 2.5)
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite:///x.db?journal=off", "unknown sqlite URL parameter"),
        ("sqlite:///x.db?busy_timeout=soon", "not a number"),
        ("sqlite:///x.db?synchronous=sometimes", "synchronous must be"),
    ],
)
def test_bad_sqlite_url_parameters_are_refused_clearly(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_store(url)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_an_unreachable_postgres_server_is_a_store_error(scheme: str, tmp_path: Path) -> None:
    # A Unix socket folder with no server in it: refused at once, no network involved.
    with pytest.raises(StoreError, match="cannot open PostgreSQL"):
        open_store(f"{scheme}://u@/db?host={tmp_path}")


def test_an_unknown_url_scheme_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="unknown store URL scheme 'mysql'"):
        open_store("mysql://localhost/db")


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an SQLite database, not even close" * 100)
    with pytest.raises(StoreError, match="cannot open"):
        open_store(junk)


@pytest.mark.parametrize(
    "seconds",
    [0, -1, math.inf, math.nan, 10**400],
    ids=["0", "-1", "inf", "nan", "int-past-floats"],
)
def test_a_postgres_store_timeout_that_is_no_positive_finite_number_is_refused(
    seconds: float,
) -> None:
    # Checked before any connection is tried; an int past any float raised OverflowError.
    with pytest.raises(ValueError, match="store_timeout must be a positive number of seconds"):
        open_store("postgresql://nobody@127.0.0.1:1/none", store_timeout=seconds)
