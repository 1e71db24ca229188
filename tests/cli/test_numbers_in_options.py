"""Numbers given on the command line: refused with a usage error (exit 2) when no part of
trio_batch can hold them, and a stored time past any date still shown, not a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from .test_cli import cli, write_batch


@pytest.mark.parametrize("flag", ["--ttl", "--target-timeout"])
@pytest.mark.parametrize("value", ["1e300", "1e400", "\u0663", "1_0", " 5", "nan"])
def test_run_refuses_seconds_no_date_or_digit_reading_can_hold(
    tmp_path: Path, flag: str, value: str
) -> None:
    # --ttl 1e300 was taken: the job was stored with an expiry past any date, and every later
    # `trio-batch jobs` or `status` failed with OverflowError. "٣" and "1_0" were read as 3
    # and 10 by float().
    batch = write_batch(tmp_path / "b.txt", ["https://example.test/"])
    proc = cli("run", str(batch), "--db", str(tmp_path / "b.db"), flag, value)
    assert proc.returncode == 2, proc.stderr
    assert f"{flag}: expected a positive number of seconds up to" in proc.stderr
    assert not (tmp_path / "b.db").exists()


def test_a_century_of_ttl_is_taken(tmp_path: Path) -> None:
    page = tmp_path / "page.txt"
    page.write_text("hello")
    batch = write_batch(tmp_path / "b.txt", [page.as_uri()])
    db = str(tmp_path / "b.db")
    proc = cli("run", str(batch), "--db", db, "--ttl", "3153600000", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "done" in cli("jobs", "--db", db).stdout


def test_jobs_and_status_show_a_stored_expiry_past_any_date(tmp_path: Path) -> None:
    # A database written before the bound (or by hand) may hold such a time: it is shown as
    # the number it is.
    page = tmp_path / "page.txt"
    page.write_text("hello")
    batch = write_batch(tmp_path / "b.txt", [page.as_uri()])
    db = tmp_path / "b.db"
    assert cli("run", str(batch), "--db", str(db), "-q").returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE jobs SET expires_at = 1e300")
        (job_id,) = conn.execute("SELECT id FROM jobs").fetchone()
    conn.close()
    for args in (("jobs",), ("status", job_id)):
        proc = cli(*args, "--db", str(db))
        assert proc.returncode == 0, proc.stderr
        assert "1e+300" in proc.stdout


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--body-timeout", "inf"),  # a trickled body was never cut off
        ("--body-timeout", "1e400"),
        ("--max-body", "\u0663"),  # int() read it as 3
        ("--max-body", "1_0"),
        ("--process-timeout", "1e308"),  # every processed body: OverflowError at setrlimit
        ("--cancel-grace", "1_0"),
        ("--ttl", "\u0663"),
        ("--ttl", "1e300"),
        ("--targets-per-job", "1_0"),
        ("--jobs-total", "\u0663"),
        ("--poll-interval", " 5"),
    ],
)
def test_serve_refuses_numbers_before_it_serves(tmp_path: Path, flag: str, value: str) -> None:
    # Run in this process: a serve that took the value would serve until the test's timeout.
    proc = cli("serve", "--db", str(tmp_path / "s.db"), "--caller-header", "X-C", flag, value)
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    "bind",
    ["127.0.0.1:70000", "127.0.0.1:-1", "127.0.0.1:" + "9" * 20, "127.0.0.1:1_0000", "localhost"],
)
def test_serve_refuses_a_port_no_socket_takes_before_opening_anything(
    tmp_path: Path, bind: str
) -> None:
    # 70000, -1 and 20 nines failed in a traceback (OverflowError from bind()) after the
    # store was opened; "1_0000" (and Arabic-Indic digits) served on port 10000.
    proc = cli("serve", "--db", str(tmp_path / "s.db"), "--caller-header", "X-C", "--bind", bind)
    assert proc.returncode == 2, proc.stderr
    assert "--bind: bind is HOST:PORT with a port from 0 to 65535" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "s.db").exists()
