"""The ``trio-batch`` command against a local HTTP server: in this process where only its output
and exit code matter, in a subprocess where the process is the point (signals, a terminal,
the console script)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from trio_batch import JobState, Store, TargetState

from ..support.cli_runner import run_cli
from ..support.local_server import LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

#: Generous bound on one command, against hangs only: commands take well under a second.
TIMEOUT = 60


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRIO_BATCH_DB", "COLUMNS")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "trio_batch", *args]


def cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``trio-batch ARGS`` to completion in this process; stdout and stderr are captured.

    ``serve`` is run here only to be refused: one that started would serve until the test's
    timeout (``timeout`` in pyproject.toml) failed it.
    """
    return run_cli(args, stdin=stdin, env=env or _env())


def cli_process(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m trio_batch ARGS`` to completion; stdout and stderr are captured."""
    return subprocess.run(
        _cmd(*args),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env or _env(),
        check=False,
    )


def write_batch(path: Path, lines: Sequence[str | dict[str, Any]]) -> Path:
    """A batch file: strings as they are (URLs, comments), dicts as JSON Lines."""
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    )
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "batch.db"


def stored(db: Path, job_id: str) -> tuple[Any, list[Any]]:
    with Store.open(db) as store:
        found = store.get_status(job_id)
    assert found is not None
    return found


# --------------------------------------------------------------------------------------------
# run


def test_run_shows_progress_and_a_table(server: LocalServer, tmp_path: Path, db: Path) -> None:
    batch = write_batch(
        tmp_path / "batch.jsonl",
        [
            "# pages of the local fixture server",
            {"url": server.url("/page.html"), "options": {"mode": "text", "grep": "pears"}},
            {"url": server.url("/data.json"), "options": {"jq": ".items[].tag"}},
            server.url("/text.txt"),
            {"url": server.url("/missing")},
        ],
    )
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 1, proc.stderr  # partial
    # Plain progress lines on stderr (not a terminal), one per stored outcome.
    progress = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 4
    assert progress[0].startswith("[1/4] done") and server.url("/page.html") in progress[0]
    assert progress[3].startswith("[4/4, 1 failed] failed")
    assert "/s" in progress[3]  # the rate
    # The table on stdout.
    assert "partial" in proc.stdout
    assert "The second paragraph mentions pears." in proc.stdout
    assert "HTTP 404" in proc.stdout
    assert "hint: the page does not exist" in proc.stdout
    assert "3 done, 1 failed, 0 not fetched" in proc.stdout


def test_run_json_and_a_done_job(server: LocalServer, tmp_path: Path, db: Path) -> None:
    batch = write_batch(tmp_path / "urls.txt", [server.url("/text.txt"), server.url("/doc.pdf")])
    proc = cli("run", str(batch), "--db", str(db), "--json", "--caller", "me", "--class", "t")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["reused"] is False
    assert out["job"]["status"] == "done"
    assert out["job"]["caller"] == "me"
    assert out["job"]["caller_class"] == "t"
    assert [t["status"] for t in out["targets"]] == ["done", "done"]
    assert out["targets"][0]["result"]["meta"]["status_code"] == 200
    assert "Second page text" in out["targets"][1]["result"]["content"]
    job, _ = stored(db, out["job"]["id"])
    assert job.status == JobState.DONE


def test_rerun_shows_the_stored_job_and_fetches_nothing(
    server: LocalServer, tmp_path: Path, db: Path
) -> None:
    batch = write_batch(tmp_path / "urls.txt", [server.url("/page.html"), server.url("/missing")])
    first = cli("run", str(batch), "--db", str(db), "--json")
    assert first.returncode == 1
    assert server.count("/page.html") == 1
    again = cli("run", str(batch), "--db", str(db), "--json")
    assert again.returncode == 1
    assert server.count("/page.html") == 1  # nothing fetched
    assert server.count("/missing") == 1
    assert "nothing was fetched" in again.stderr
    first_out, again_out = json.loads(first.stdout), json.loads(again.stdout)
    assert again_out["reused"] is True
    assert again_out["job"]["id"] == first_out["job"]["id"]
    assert again_out["targets"] == first_out["targets"]
    table = cli("run", str(batch), "--db", str(db))
    assert first_out["job"]["id"] in table.stdout
    assert "1 done, 1 failed" in table.stdout


def test_stdin(server: LocalServer, db: Path) -> None:
    proc = cli("run", "-", "--db", str(db), "--json", stdin=server.url("/text.txt") + "\n")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["targets"][0]["url"] == server.url("/text.txt")


def test_quiet(server: LocalServer, tmp_path: Path, db: Path) -> None:
    batch = write_batch(tmp_path / "urls.txt", [server.url("/text.txt")])
    proc = cli("run", str(batch), "--db", str(db), "--quiet")
    assert proc.returncode == 0
    assert proc.stderr == ""


def test_default_db_comes_from_the_environment(server: LocalServer, tmp_path: Path) -> None:
    batch = write_batch(tmp_path / "urls.txt", [server.url("/text.txt")])
    db = tmp_path / "sub" / "env.db"
    db.parent.mkdir()
    proc = cli("run", str(batch), "--quiet", env=_env(TRIO_BATCH_DB=str(db)))
    assert proc.returncode == 0, proc.stderr
    assert db.exists()
    assert "--db" in proc.stdout  # the hint to read the full results names the database


# --------------------------------------------------------------------------------------------
# Ctrl-C


def _start_gated_run(server: LocalServer, tmp_path: Path, db: Path) -> subprocess.Popen[str]:
    """Start a run whose second target is held by the server until ``server.gate`` is set."""
    batch = write_batch(
        tmp_path / "urls.txt",
        [server.url("/page.html"), server.url("/gate"), server.url("/text.txt"), server.url("/x")],
    )
    proc = subprocess.Popen(
        _cmd("run", str(batch), "--db", str(db), "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert server.gate_entered.wait(TIMEOUT), "the gated target was never requested"
    return proc


def _read_until(proc: subprocess.Popen[str], needle: str) -> str:
    assert proc.stderr is not None
    seen = []
    while line := proc.stderr.readline():
        seen.append(line)
        if needle in line:
            return "".join(seen)
    raise AssertionError(f"{needle!r} never shown; stderr was {''.join(seen)!r}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_cancels_and_stores_the_target_in_flight(
    server: LocalServer, tmp_path: Path, db: Path, signum: signal.Signals
) -> None:
    # SIGTERM (a process manager's stop) as Ctrl-C: it killed the run, its job left running.
    proc = _start_gated_run(server, tmp_path, db)
    try:
        proc.send_signal(signum)
        _read_until(proc, "cancelling")  # the job is cancelled before the fetch completes
        server.gate.set()
        stdout, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 130
    out = json.loads(stdout)
    assert out["job"]["status"] == "cancelled"
    job, targets = stored(db, out["job"]["id"])
    assert job.status == JobState.CANCELLED
    assert [t.status for t in targets] == [
        TargetState.DONE,
        TargetState.DONE,  # the one in flight finished and was stored
        TargetState.PENDING,
        TargetState.PENDING,
    ]
    assert targets[1].result is not None and targets[1].result.content == "released"
    assert server.count("/text.txt") == 0


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_second_ctrl_c_stops_at_once(
    server: LocalServer, tmp_path: Path, db: Path, second: signal.Signals
) -> None:
    proc = _start_gated_run(server, tmp_path, db)
    try:
        proc.send_signal(signal.SIGINT)
        _read_until(proc, "cancelling")
        proc.send_signal(second)  # the gate stays shut: the fetch is abandoned
        stdout, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 130
    job, targets = stored(db, json.loads(stdout)["job"]["id"])
    assert job.status == JobState.CANCELLED
    assert [t.status for t in targets][1:] == [TargetState.PENDING] * 3


# --------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ('https://a.test/\n{"url": "https://b.test/"\n', 2, "not valid JSON"),
        ('https://a.test/\n\n{"url": "https://b.test/", "opts": {}}\n', 3, "unknown target key"),
        ('{"url": "https://b.test/", "options": {"gerp": "x"}}\n', 1, "unknown option"),
        ('{"url": "https://b.test/", "options": {"context": "yes"}}\n', 1, "true or false"),
        ("https://a.test/\n# comment\nhttps://a.test/\n", 3, "repeats the target on line 1"),
        ("https://a.test/\nnot a url\n", 2, "not a URL"),
        ('{"url": 7}\n', 1, "url must be a string"),
        ('[\n  {"url": "https://a.test/"},\n  {"url": ""}\n]\n', 3, "url must not be empty"),
        ('[\n  {"url": "https://a.test/"},\n  {"url": "https://b.test/"\n]\n', 4, "JSON"),
        ('[{"url": "https://a.test/"}] extra\n', 1, "extra data"),
        # Quoted URL lines used to fail at fetch time with a nonsense hint (issue 12).
        ('https://a.test/\n"https://b.test/"\n', 2, "is quoted; write the URL bare"),
        ("'https://b.test/'\n", 1, "is quoted"),
        ('https://b.test/"\n', 1, "is quoted"),
    ],
)
def test_bad_target_exits_2_with_the_line(
    tmp_path: Path, db: Path, content: str, line: int, message: str
) -> None:
    batch = tmp_path / "bad.jsonl"
    batch.write_text(content)
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert f"{batch}:{line}: " in proc.stderr
    assert message in proc.stderr
    assert not db.exists()  # nothing submitted


@pytest.mark.parametrize("content", ["", "\n# only a comment\n", "[]"])
def test_empty_batch_exits_2(tmp_path: Path, db: Path, content: str) -> None:
    batch = tmp_path / "empty.txt"
    batch.write_text(content)
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert "no targets" in proc.stderr


def test_usage_errors_exit_2(tmp_path: Path, db: Path) -> None:
    assert cli().returncode == 2
    assert cli("run", str(tmp_path / "nope.txt"), "--db", str(db)).returncode == 2
    batch = write_batch(tmp_path / "urls.txt", ["https://a.test/"])
    proc = cli("run", str(batch), "--db", str(db), "--caller", "")
    assert proc.returncode == 2
    assert "caller" in proc.stderr
    for ttl in ("0", "-5", "inf", "nan"):
        assert cli("run", str(batch), "--db", str(db), "--ttl", ttl).returncode == 2
    proc = cli("run", str(batch), "--db", str(tmp_path / "no" / "such" / "dir.db"))
    assert proc.returncode == 2
    assert "cannot open the database" in proc.stderr
    not_a_db = tmp_path / "not.db"
    not_a_db.write_text("this is not SQLite")
    proc = cli("run", str(batch), "--db", str(not_a_db))
    assert proc.returncode == 2
    assert "trio-batch:" in proc.stderr


def test_a_second_run_on_the_same_database_is_refused(tmp_path: Path, db: Path) -> None:
    batch = write_batch(tmp_path / "urls.txt", ["https://a.test/"])
    Store.open(db).close()
    with open(f"{db}-runner.lock", "a+") as lock:  # what a running runner holds
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 3  # its own code: not a job that ran and failed (1)
    assert "another trio-batch run (or runner) is using" in proc.stderr
    with Store.open(db) as store:
        assert store.list_jobs() == []  # nothing submitted


# --------------------------------------------------------------------------------------------
# status, results, jobs, gc


def test_status_results_jobs_and_gc(server: LocalServer, tmp_path: Path, db: Path) -> None:
    batch = write_batch(
        tmp_path / "batch.jsonl",
        [{"url": server.url("/data.json"), "options": {"jq": ".name"}}, server.url("/error")],
    )
    # No retries: the 500 fails at once instead of after the policy's 1 s and 2 s waits.
    ran = cli("run", str(batch), "--db", str(db), "--json", "--caller", "ann", "--retries", "0")
    run = json.loads(ran.stdout)
    job_id = run["job"]["id"]

    status = cli("status", job_id, "--db", str(db))
    assert status.returncode == 0
    assert job_id in status.stdout
    assert "partial" in status.stdout
    assert "HTTP 500" in status.stdout

    results = cli("results", job_id, "--db", str(db))
    assert results.returncode == 0
    assert results.stdout.splitlines()[1] == "fixture"  # jq's output, under the header line
    assert "hint: the server failed" in results.stdout

    as_json = json.loads(cli("results", job_id, "--db", str(db), "--json").stdout)
    assert as_json == {"job": run["job"], "targets": run["targets"]}

    jobs = cli("jobs", "--db", str(db))
    assert job_id in jobs.stdout
    assert (
        json.loads(cli("jobs", "--db", str(db), "--json", "--caller", "ann").stdout)[0]["id"]
        == job_id
    )
    assert json.loads(cli("jobs", "--db", str(db), "--json", "--caller", "bob").stdout) == []

    gc = cli("gc", "--db", str(db))
    assert gc.returncode == 0
    assert gc.stdout.strip() == "purged 0 expired job(s)"


@pytest.mark.parametrize(
    "text", ['[{"url": "http://x.test/", "n": 1%s}]', '{"url": "http://x.test/", "n": 1%s}']
)
def test_a_huge_number_in_a_batch_file_is_an_input_error(
    tmp_path: Path, db: Path, text: str
) -> None:
    """Python's own message told the user to call sys.set_int_max_str_digits() (issue 12)."""
    batch = tmp_path / "batch.json"
    batch.write_text(text % ("0" * 5000) + "\n")
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"trio-batch: {batch}:1: not valid JSON: a number of 5001 digits")
    assert "Traceback" not in proc.stderr and "sys." not in proc.stderr


def test_a_library_warning_does_not_print_as_trio_batch(
    server: LocalServer, tmp_path: Path, db: Path
) -> None:
    """pypdf's warnings about a damaged PDF printed as 'trio-batch: ...' (issue 12)."""
    import re

    from ..support.local_server import make_pdf

    data = make_pdf(["Hello page"])
    m = re.search(rb"startxref\s+(\d+)", data)
    assert m is not None
    damaged = tmp_path / "damaged.pdf"  # a wrong startxref: pypdf warns, then recovers
    damaged.write_bytes(data[: m.start(1)] + str(int(m.group(1)) + 7).encode() + data[m.end(1) :])
    # In a process of its own: the PDF is read in a worker process, whose stderr is the
    # command's only when the command is a process.
    proc = cli_process(
        "run", write_batch(tmp_path / "b.txt", [damaged.as_uri()]).as_posix(), "--db", str(db)
    )
    assert proc.returncode == 0, proc.stderr
    assert "startxref" not in proc.stderr


@contextlib.contextmanager
def command_logging(*, as_json: bool = False) -> Iterator[None]:
    """Logging set up as ``trio-batch run`` sets it up, put back as it was afterwards."""
    from trio_batch.cli import _run as _cli_run

    root, own = logging.getLogger(), logging.getLogger("trio_batch")
    saved = (root.handlers[:], root.level, own.handlers[:], own.level, own.propagate)
    try:
        _cli_run._configure_logging(as_json=as_json)
        yield
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        own.handlers[:], own.level, own.propagate = saved[2], saved[3], saved[4]


def test_log_lines_are_named_for_their_source(capsys: pytest.CaptureFixture[str]) -> None:
    with command_logging():
        logging.getLogger("pypdf").warning("a library speaks")
        logging.getLogger("trio_batch.runner").warning("the command speaks")
        logging.getLogger("httpx").info("below the threshold")
    err = capsys.readouterr().err
    assert "pypdf: WARNING: a library speaks\n" in err
    assert "trio-batch: the command speaks\n" in err
    assert "trio-batch: a library" not in err and "below the threshold" not in err


def test_forget_lets_the_same_batch_run_again(
    server: LocalServer, tmp_path: Path, db: Path
) -> None:
    batch = write_batch(tmp_path / "batch.txt", [server.url("/text.txt")])
    first = json.loads(cli("run", str(batch), "--db", str(db), "--json").stdout)
    job_id = first["job"]["id"]
    again = cli("run", str(batch), "--db", str(db), "--json")
    assert json.loads(again.stdout)["reused"] is True  # the stored job; nothing fetched
    forget = cli("forget", job_id, "--db", str(db))
    assert forget.returncode == 0, forget.stderr
    assert forget.stdout.startswith(f"forgot job {job_id} (done, 1 target(s))")
    fresh = json.loads(cli("run", str(batch), "--db", str(db), "--json").stdout)
    assert fresh["reused"] is False and fresh["job"]["id"] != job_id
    assert server.count("/text.txt") == 2
    gone = cli("forget", job_id, "--db", str(db))
    assert gone.returncode == 1 and f"no job {job_id}" in gone.stderr


def _job_renamed(db: Path, job_id: str, new_id: str) -> None:
    """Give a stored job another id (one an older trio-batch could draw: starting with -)."""
    import sqlite3

    conn = sqlite3.connect(db)
    with conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("UPDATE jobs SET id = ? WHERE id = ?", (new_id, job_id))
        conn.execute("UPDATE targets SET job_id = ? WHERE job_id = ?", (new_id, job_id))
    conn.close()


@pytest.mark.parametrize(
    "args",
    [
        ("status", "{id}", "--db", "{db}"),
        ("status", "--db", "{db}", "{id}"),
        ("status", "--db", "{db}", "--", "{id}"),
        ("status", "--db", "{db}", "--job", "{id}"),
        ("status", "--job={id}", "--db", "{db}"),
        ("results", "{id}", "--json", "--db", "{db}"),
        ("results", "--json", "--db", "{db}", "--", "{id}"),
        ("forget", "{id}", "--db", "{db}"),
    ],
)
def test_job_ids_starting_with_a_dash_are_accepted(
    server: LocalServer, tmp_path: Path, db: Path, args: tuple[str, ...]
) -> None:
    """``trio-batch status -hY...`` read the id as options (issue 12, item 6)."""
    batch = write_batch(tmp_path / "batch.txt", [server.url("/text.txt")])
    run = json.loads(cli("run", str(batch), "--db", str(db), "--json").stdout)
    dashed = "-hY" + run["job"]["id"][3:]
    _job_renamed(db, run["job"]["id"], dashed)
    proc = cli(*(a.format(id=dashed, db=db) for a in args))
    assert proc.returncode == 0, proc.stderr
    assert dashed in proc.stdout


def test_a_job_id_given_twice_or_not_at_all_is_a_usage_error(db: Path) -> None:
    for args in (("status", "--db", str(db)), ("status", "a", "--job", "b", "--db", str(db))):
        proc = cli(*args)
        assert proc.returncode == 2
        assert "takes one job id" in proc.stderr


@pytest.mark.parametrize("command", ["status", "results"])
def test_missing_job(db: Path, command: str) -> None:
    proc = cli(command, "AAAAAAAAAAAAAAAAAAAAAA", "--db", str(db))
    assert proc.returncode == 1
    assert "no job AAAAAAAAAAAAAAAAAAAAAA" in proc.stderr
    assert not db.exists()  # reading never creates a database
    Store.open(db).close()
    proc = cli(command, "AAAAAAAAAAAAAAAAAAAAAA", "--db", str(db))
    assert proc.returncode == 1
    assert "no job AAAAAAAAAAAAAAAAAAAAAA" in proc.stderr


# --------------------------------------------------------------------------------------------
# Packaging and help


def test_console_script_and_help() -> None:
    script = Path(sys.executable).parent / "trio-batch"
    proc = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert proc.returncode == 0
    assert "user data directory" in proc.stdout  # the choice of default database, explained
    assert "130" in proc.stdout
    run_help = cli("run", "--help")
    assert "Ctrl-C" in run_help.stdout
    assert "JSON array" in run_help.stdout


def test_live_progress_on_a_terminal(server: LocalServer, tmp_path: Path, db: Path) -> None:
    import pty

    batch = write_batch(tmp_path / "urls.txt", [server.url("/text.txt"), server.url("/missing")])
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        _cmd("run", str(batch), "--db", str(db), "--json"),
        stdout=subprocess.PIPE,
        stderr=secondary,
        env=_env(),
    )
    os.close(secondary)
    screen = bytearray()
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    os.close(primary)
    stdout, _ = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 1
    text = screen.decode("utf-8", "replace")
    assert "2/2" in text  # the bar's done/total
    assert "1 failed" in text
    assert "/s" in text  # the rate
    assert json.loads(stdout)["job"]["status"] == "partial"


# --------------------------------------------------------------------------------------------
# Retries


def test_a_transient_failure_is_retried_and_the_progress_says_so(
    server: LocalServer, tmp_path: Path, db: Path
) -> None:
    flaky = server.url("/flaky?fail=1&status=503")
    batch = write_batch(tmp_path / "urls.txt", [flaky, server.url("/missing")])
    proc = cli("run", str(batch), "--db", str(db), "--retries", "1")
    assert proc.returncode == 1, proc.stderr  # the 404 is final: partial
    retries = [line for line in proc.stderr.splitlines() if line.startswith("retrying")]
    # One retry for the 503 (after the policy's first delay, 1 s with 10% jitter); none for
    # the 404.
    assert len(retries) == 1, proc.stderr
    assert re.fullmatch(
        r"retrying target 0 in (0\.9|1\.0|1\.1) s \(attempt 2 of 2\): HTTPStatusError: "
        rf"HTTP 503 Service Unavailable from {re.escape(flaky)}",
        retries[0],
    ), retries
    assert server.count("/flaky?fail=1&status=503") == 2
    assert server.count("/missing") == 1
    job_id = json.loads(cli("jobs", "--db", str(db), "--json").stdout)[0]["id"]
    results = json.loads(cli("results", job_id, "--db", str(db), "--json").stdout)
    assert [(t["status"], t["attempts"]) for t in results["targets"]] == [
        ("done", 2),
        ("failed", 1),
    ]
    assert "2 attempts" in cli("status", job_id, "--db", str(db)).stdout


def test_retries_0_fails_a_transient_error_at_once(
    server: LocalServer, tmp_path: Path, db: Path
) -> None:
    batch = write_batch(tmp_path / "urls.txt", [server.url("/flaky?fail=1&status=503")])
    proc = cli("run", str(batch), "--db", str(db), "--retries", "0", "--json")
    assert proc.returncode == 1, proc.stderr
    target = json.loads(proc.stdout)["targets"][0]
    assert (target["status"], target["attempts"]) == ("failed", 1)
    assert "retrying" not in proc.stderr
    assert server.count("/flaky?fail=1&status=503") == 1


@pytest.mark.parametrize("value", ["-1", "two", "101", "²"])
def test_a_bad_retries_value_is_a_usage_error(tmp_path: Path, db: Path, value: str) -> None:
    batch = write_batch(tmp_path / "urls.txt", ["https://example.test/"])
    proc = cli("run", str(batch), "--db", str(db), "--retries", value)
    assert proc.returncode == 2
    assert "--retries" in proc.stderr and "whole number from 0 to 100" in proc.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"grep": "("}, "not a valid regular expression"),
        ({"jq": ".[ "}, "does not compile"),
        ({"pages": "3-1"}, "backwards range"),
        ({"mode": "pdf"}, "unknown mode 'pdf'"),
    ],
)
def test_a_bad_option_exits_2_with_the_line_before_the_database_exists(
    tmp_path: Path, db: Path, options: dict[str, Any], message: str
) -> None:
    batch = write_batch(
        tmp_path / "bad.jsonl",
        ["# a comment", "https://a.test/", {"url": "https://b.test/", "options": options}],
    )
    proc = cli("run", str(batch), "--db", str(db))
    assert proc.returncode == 2
    assert f"{batch}:3: target 1 (https://b.test/): " in proc.stderr
    assert message in proc.stderr
    assert "hint: " in proc.stderr
    assert not db.exists()  # nothing submitted, not even the database created
