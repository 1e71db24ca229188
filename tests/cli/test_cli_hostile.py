"""The command line against hostile input and output: whatever a batch file or a fetched page
holds, nothing steers the terminal, no read is unbounded, and every refusal is one line with
exit 2 (issue 26)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
from pathlib import Path

import pytest

from trio_batch._text import CONTROL_CHARACTER

from ..support.local_server import CONTROLS, LocalServer, server
from .test_cli import (
    TIMEOUT,
    _cmd,
    _env,
    _read_until,
    _start_gated_run,
    cli,
    cli_process,
    command_logging,
    write_batch,
)

__all__ = ["server"]  # the fixture, imported for pytest

#: What no output channel may carry raw: ESC, NUL, BEL, DEL, the 8-bit CSI, the RTL override.
RAW = ("\x1b", "\x00", "\x07", "\x7f", "\x9b", "\u202e")


def assert_printable(text: str) -> None:
    """Nothing in ``text`` but tabs and line breaks among the control characters."""
    bad = {ch for ch in CONTROL_CHARACTER.findall(text) if ch not in "\t\n"}
    assert not bad, f"raw control characters {sorted(bad)!r} in {text!r:.500}"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "batch.db"


# --------------------------------------------------------------------------------------------
# Output: every channel escapes


def test_fetched_control_characters_are_escaped_everywhere_they_are_printed(
    server: LocalServer, tmp_path: Path, db: Path
) -> None:
    batch = write_batch(tmp_path / "urls.txt", [server.url("/controls.txt")])
    run = cli("run", str(batch), "--db", str(db))
    assert run.returncode == 0, run.stderr
    for text in (run.stdout, run.stderr):
        assert_printable(text)
    assert "\\x1b]0;PWNED" in run.stdout  # the preview line, escaped
    job_id = json.loads(cli("run", str(batch), "--db", str(db), "--json").stdout)["job"]["id"]
    results = cli("results", job_id, "--db", str(db))
    status = cli("status", job_id, "--db", str(db))
    jobs = cli("jobs", "--db", str(db))
    for proc in (results, status, jobs):
        assert proc.returncode == 0, proc.stderr
        assert_printable(proc.stdout + proc.stderr)
    assert "\\u202egnp.exe\nsecond line" in results.stdout  # escaped, lines kept
    as_json = cli("results", job_id, "--db", str(db), "--json")
    for raw in RAW:
        assert raw not in as_json.stdout
    content = json.loads(as_json.stdout)["targets"][0]["result"]["content"]
    assert content == CONTROLS  # the same value, only spelled with escapes


def test_a_url_with_a_control_character_exits_2_with_the_line(tmp_path: Path, db: Path) -> None:
    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        '{"url": "https://a.test/"}\n{"url": "https://b.test/?\\u001b]0;PWNED\\u0007\\u001b[2J"}\n'
    )
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert f"{batch}:2: url contains the control character U+001B" in proc.stderr
    assert_printable(proc.stderr)
    assert not db.exists()  # refused before anything was opened


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_a_json_line_holding_a_unicode_line_separator_is_one_target(
    tmp_path: Path, db: Path, separator: str
) -> None:
    # Valid JSON Lines, as json.dumps(ensure_ascii=False) writes them: the separator is raw
    # inside a string. str.splitlines broke the line there and refused the file as bad JSON.
    page = tmp_path / "page.txt"
    page.write_text("hello")
    custom_id = f"one{separator}two"
    batch = tmp_path / "batch.jsonl"
    line = {"url": page.as_uri(), "custom_id": custom_id}
    batch.write_text(json.dumps(line, ensure_ascii=False) + "\n", encoding="utf-8")
    run = cli("run", str(batch), "--db", str(db), "--json")
    assert run.returncode == 0, run.stderr
    job_id = json.loads(run.stdout)["job"]["id"]
    results = json.loads(cli("results", job_id, "--db", str(db), "--json").stdout)
    assert [t["custom_id"] for t in results["targets"]] == [custom_id]


@pytest.mark.parametrize("control", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e"])
def test_a_url_line_holding_a_line_breaking_control_is_refused_not_split(
    tmp_path: Path, db: Path, control: str
) -> None:
    # str.splitlines broke the line at these: one URL became two targets (the second without
    # a scheme, failing at fetch), or a trailing one vanished without a word.
    batch = tmp_path / "batch.txt"
    batch.write_text(f"https://a.test/\nhttps://b.test/x{control}y\n", encoding="utf-8")
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert f"{batch}:2: 'https://b.test/x\\x{ord(control):02x}y' is not a URL" in proc.stderr
    assert_printable(proc.stderr)
    assert not db.exists()  # refused before anything was opened


def test_old_mac_line_ends_still_end_lines(tmp_path: Path, db: Path) -> None:
    page = tmp_path / "page.txt"
    page.write_text("hello")
    batch = tmp_path / "batch.txt"
    batch.write_text(f"# CR only\r{page.as_uri()}\r\r{page.as_uri()}?b\r\n", encoding="utf-8")
    run = cli("run", str(batch), "--db", str(db), "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["job"]["targets_total"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["jobs", "--caller", "a\udcff"], "--caller: caller is not valid Unicode"),
        (["jobs", "--caller", "a\x1b[2J", "--status", "done"], "--caller: caller contains the"),
        (["run", "BATCH", "--caller", "a\x9b"], "--caller: caller contains the"),
        (["run", "BATCH", "--class", "a\udcff"], "--class: caller class is not valid"),
        (["import-warc", "x.warc", "--caller", ""], "--caller: caller must be a non-empty"),
    ],
)
def test_a_caller_name_no_job_can_have_is_a_usage_error(
    tmp_path: Path, db: Path, args: list[str], message: str
) -> None:
    # A real command line: "\udcff" is what Python makes of the byte 0xff in argv. `jobs
    # --caller` sent it to the store, which died with a UnicodeEncodeError traceback.
    batch = write_batch(tmp_path / "batch.txt", ["https://a.test/"])
    proc = cli_process(*[str(batch) if a == "BATCH" else a for a in args], "--db", str(db))
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert_printable(proc.stderr)
    assert not db.exists()  # refused before anything was opened


def test_a_batch_file_that_is_not_utf8_names_the_line_and_column(tmp_path: Path, db: Path) -> None:
    # It said "can't decode byte 0xff in position 49": a byte offset into the whole file.
    batch = tmp_path / "batch.txt"
    batch.write_bytes(b"https://a.test/1\nhttps://a.test/2\nhttps://a.test/\xff3\n")
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert f"{batch}:3: not UTF-8 text: the byte 0xff at column 16" in proc.stderr
    assert not db.exists()
    piped = subprocess.run(
        _cmd("run", "-", "--db", str(db)),
        input=b"ok\n\xc3(",
        capture_output=True,
        timeout=TIMEOUT,
        env=_env(),
        check=False,
    )
    assert piped.returncode == 2
    assert b"<stdin>:2: not UTF-8 text: the byte 0xc3 at column 1" in piped.stderr


@pytest.mark.parametrize("login", ["a\x1b[2Jb", "a\udcffb"])
def test_a_login_name_no_job_can_have_is_a_usage_error_naming_caller(
    tmp_path: Path, db: Path, login: str
) -> None:
    # The default caller is the login name: it was submitted as it was, refused by the
    # runner once the database was made, with nothing saying where the name came from.
    batch = write_batch(tmp_path / "batch.txt", ["https://a.test/"])
    proc = cli_process("run", str(batch), "--db", str(db), env={**_env(), "LOGNAME": login})
    assert proc.returncode == 2, proc.stderr
    assert "your login name cannot be a caller" in proc.stderr and "--caller" in proc.stderr
    assert_printable(proc.stderr)
    assert not db.exists()


def test_an_error_quoting_the_input_is_escaped(tmp_path: Path, db: Path) -> None:
    batch = tmp_path / "batch.txt"
    batch.write_bytes(b'"https://a.test/\x1b[2J\xc2\x9b31m"\n')  # quoted: the message quotes it
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert "is quoted" in proc.stderr and "\\x1b[2J" in proc.stderr
    assert_printable(proc.stderr)


# --------------------------------------------------------------------------------------------
# Input: every channel is bounded


@pytest.mark.parametrize("name", ["/dev/zero", "fifo", "directory"])
def test_a_batch_file_that_is_not_a_regular_file_is_refused(
    tmp_path: Path, db: Path, name: str
) -> None:
    path = name
    if name == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)  # no writer: opening it for reading would block
    elif name == "directory":
        path = str(tmp_path)
    proc = cli("run", path, "-q", "--db", str(db))
    assert proc.returncode == 2, proc.stderr
    expected = "Is a directory" if name == "directory" else "is not a regular file"
    assert f"{path}" in proc.stderr and expected in proc.stderr
    assert "Traceback" not in proc.stderr


def test_endless_standard_input_is_cut_at_the_cap(db: Path) -> None:
    with open("/dev/zero", "rb") as zero:
        proc = subprocess.run(
            _cmd("run", "-", "-q", "--db", str(db)),
            stdin=zero,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=_env(),
            check=False,
        )
    assert proc.returncode == 2
    assert "standard input holds more than 32 MiB" in proc.stderr


def test_a_batch_file_past_the_cap_is_refused(tmp_path: Path, db: Path) -> None:
    big = tmp_path / "big.txt"
    with big.open("wb") as f:
        f.truncate(33 * 1024 * 1024)  # sparse: costs no disk
    proc = cli("run", str(big), "-q", "--db", str(db))
    assert proc.returncode == 2
    assert f"{big} holds more than 32 MiB" in proc.stderr


@pytest.mark.parametrize("layout", ["array", "line"])
def test_a_deeply_nested_batch_file_is_an_input_error(
    tmp_path: Path, db: Path, layout: str
) -> None:
    batch = tmp_path / "deep.json"
    deep = "[" * 100_000 + "]" * 100_000
    batch.write_text(deep if layout == "array" else "https://a.test/\n" + '{"url": ' + deep + "}")
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2, proc.stderr
    line = 1 if layout == "array" else 2
    assert f"{batch}:{line}: not valid JSON: nested too deeply" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_repeated_key_in_a_batch_file_is_an_input_error(tmp_path: Path, db: Path) -> None:
    batch = tmp_path / "batch.jsonl"
    batch.write_text('https://a.test/\n{"url": "https://b.test/", "url": "https://c.test/"}\n')
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert f"{batch}:2:" in proc.stderr and "'url' appears twice" in proc.stderr


# --------------------------------------------------------------------------------------------
# Big batches


def test_more_targets_than_max_targets_is_refused_with_a_hint(tmp_path: Path, db: Path) -> None:
    batch = write_batch(tmp_path / "urls.txt", [f"https://a.test/{i}" for i in range(10_001)])
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert f"{batch} holds 10001 targets; one run fetches at most 10000" in proc.stderr
    assert "split" in proc.stderr and "--max-targets" in proc.stderr
    assert not db.exists()
    small = write_batch(tmp_path / "small.txt", [f"https://a.test/{i}" for i in range(3)])
    proc = cli("run", str(small), "--max-targets", "2", "--db", str(db))
    assert proc.returncode == 2 and "holds 3 targets; one run fetches at most 2" in proc.stderr
    proc = cli("run", str(small), "--max-targets", "0", "--db", str(db))
    assert proc.returncode == 2 and "at least 1" in proc.stderr


def test_a_table_longer_than_a_screenful_is_summarised_failures_first(
    server: LocalServer, tmp_path: Path, db: Path
) -> None:
    urls = [server.url(f"/text.txt?i={i}") for i in range(56)]
    urls += [server.url(f"/missing?i={i}") for i in range(4)]
    batch = write_batch(tmp_path / "urls.txt", urls)
    proc = cli("run", str(batch), "-q", "--retries", "0", "--db", str(db))
    assert proc.returncode == 1, proc.stderr
    shown = [url for url in urls if url in proc.stdout]
    assert len(shown) == 50  # a screenful of a pipe
    assert all(u in shown for u in urls[-4:])  # every failure among them
    assert "10 more target(s) not shown" in proc.stdout
    assert "trio-batch status" in proc.stdout
    assert "56 done, 4 failed" in proc.stdout


# --------------------------------------------------------------------------------------------
# Reruns


def _gated_run_stopped_by(
    signum: signal.Signals, server: LocalServer, tmp_path: Path, db: Path
) -> int:
    """Start a run held on its second target, send it ``signum``, let the target go once
    the run has noticed (a Ctrl-C says "cancelling"); returns the run's exit status."""
    proc = _start_gated_run(server, tmp_path, db)
    try:
        proc.send_signal(signum)
        if signum == signal.SIGINT:
            _read_until(proc, "cancelling")
        else:
            proc.wait(timeout=TIMEOUT)
        server.gate.set()
        proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    return proc.returncode


def test_rerunning_an_interrupted_batch_exits_1_and_names_forget(
    server: LocalServer, tmp_path: Path, db: Path
) -> None:
    assert _gated_run_stopped_by(signal.SIGINT, server, tmp_path, db) == 130  # interrupted
    again = cli("run", str(tmp_path / "urls.txt"), "--db", str(db))
    assert again.returncode == 1  # this one was not
    assert "It ended cancelled" in again.stderr
    assert "trio-batch forget" in again.stderr


def test_rerunning_after_a_crash_names_forget(
    server: LocalServer, tmp_path: Path, db: Path
) -> None:
    assert _gated_run_stopped_by(signal.SIGKILL, server, tmp_path, db) == -signal.SIGKILL
    again = cli("run", str(tmp_path / "urls.txt"), "--db", str(db))
    assert again.returncode == 1
    assert "It ended failed (restart)" in again.stderr
    assert "trio-batch forget" in again.stderr
    job_id = again.stderr.split("job ", 1)[1].split()[0]
    forgot = cli("forget", job_id, "--db", str(db))
    assert forgot.returncode == 0, forgot.stderr
    fresh = cli("run", str(tmp_path / "urls.txt"), "--db", str(db), "--json")
    assert json.loads(fresh.stdout)["reused"] is False


@pytest.mark.parametrize("as_json", [False, True])
def test_log_lines_are_escaped(capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    with command_logging(as_json=as_json):
        logging.getLogger("trio_batch.runner").warning("fetched %s", "\x1b[2J\u202e")
        logging.getLogger("pypdf").warning("damaged\x1b]0;PWNED\x07\nsecond line")
    err = capsys.readouterr().err
    assert_printable(err)
    if as_json:
        lines = [json.loads(line) for line in err.splitlines()]
        assert lines[0]["event"] == "fetched \x1b[2J\u202e"  # the same text, escaped
        return
    assert "trio-batch: fetched \\x1b[2J\\u202e\n" in err
    assert "pypdf: WARNING: damaged\\x1b]0;PWNED\\x07\nsecond line\n" in err
    assert_printable(err)


@pytest.mark.parametrize("name", ["/dev/zero", "fifo"])
def test_serve_refuses_a_tokens_file_that_is_not_a_regular_file(
    tmp_path: Path, db: Path, name: str
) -> None:
    path = name
    if name == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    proc = cli("serve", "--tokens", path, "--db", str(db), "--bind", "127.0.0.1:0")
    assert proc.returncode == 2, proc.stderr
    assert f"{path} is not a regular file" in proc.stderr
