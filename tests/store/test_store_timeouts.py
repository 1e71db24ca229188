"""The timeouts a store hands on to SQLite or PostgreSQL in milliseconds: refused, when no C
int can hold them, as the store is opened, with a ValueError naming the value."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trio_batch import SQLiteJobStore, Store, open_store


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-1", "1_0", "\u0663", " 5", ""])
def test_a_sqlite_url_busy_timeout_that_is_no_number_is_refused(tmp_path: Path, value: str) -> None:
    # float() read "1_0" as 10 and "٣" as 3; NaN and infinity were taken.
    with pytest.raises(ValueError, match=r"busy_timeout=.* is not a number of seconds"):
        open_store(f"sqlite:///{tmp_path}/b.db?busy_timeout={value}")
    assert not (tmp_path / "b.db").exists()


@pytest.mark.parametrize(
    "seconds",
    [math.nan, math.inf, 1e10, 3e6, 10**400],
    ids=["nan", "inf", "1e10", "3e6", "10**400"],
)
def test_a_busy_timeout_no_c_int_of_milliseconds_holds_is_refused(
    tmp_path: Path, seconds: float
) -> None:
    # sqlite3 passes it on as a C int of milliseconds: each of these became a busy timeout of
    # 0 (a locked database failed at once instead of waiting), 10**400 an OverflowError.
    with pytest.raises(ValueError, match="busy_timeout must"):
        Store.open(tmp_path / "b.db", busy_timeout=seconds)
    with pytest.raises(ValueError, match="busy_timeout"):
        open_store(f"sqlite:///{tmp_path}/b.db?busy_timeout={seconds}")
    assert not (tmp_path / "b.db").exists()


async def test_the_longest_busy_timeout_is_kept_to_the_millisecond(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/b.db?busy_timeout=2147483.647")
    assert isinstance(store, SQLiteJobStore)
    try:
        (millis,) = store.store.db.execute("PRAGMA busy_timeout").fetchone()
        assert millis == 2**31 - 1
    finally:
        await store.aclose()


@pytest.mark.parametrize("seconds", [2_147_484, 1e7, 1e100])
def test_a_postgres_store_timeout_past_its_milliseconds_is_refused_before_connecting(
    pg_dsn: str, seconds: float
) -> None:
    # statement_timeout takes at most 2**31 - 1 ms: the server refused the first statement,
    # and the open failed with StoreError ("the database refused the operation").
    with pytest.raises(ValueError, match="store_timeout must be a positive number of seconds"):
        open_store(pg_dsn, store_timeout=seconds)


async def test_a_postgres_store_timeout_of_24_days_opens(pg_dsn: str) -> None:
    store = open_store(pg_dsn, store_timeout=2_147_483)
    await store.aclose()
