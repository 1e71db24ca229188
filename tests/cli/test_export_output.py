"""``trio-batch export -o PATH`` replaces only what a file may be replaced by: a regular file
whole (keeping its mode), a symlink's target (the link kept), a pipe written to; a part left by
a killed export is removed by the next one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from trio_batch import JobState, Store, Target
from trio_batch._files import replacing
from trio_batch.cli import main
from trio_batch.store import NewJob
from trio_batch.store.sqlite._job_store import SQLiteJobStore

from .test_cli import TIMEOUT, cli, cli_process, db

__all__ = ["db"]  # the fixture, imported for pytest


@pytest.fixture
def job(db: Path) -> str:
    """A finished job of three targets in ``db``."""
    with Store.open(db) as store:
        new = NewJob(
            "me",
            "cli",
            [Target(f"https://example.test/{i}") for i in range(3)],
            ttl=3600,
            targets_per_job=4,
            jobs_per_caller=1,
            jobs_total=4,
            status=JobState.RUNNING,
        )
        made = store.create_job(new)[0].id
        for i in range(3):
            store.record_outcome(made, i, error="NetworkError: refused", ttl=3600)
    return made


def _idx(text: str) -> list[int]:
    return [json.loads(line)["idx"] for line in text.splitlines()]


def test_an_existing_file_is_replaced_whole_and_keeps_its_mode(
    db: Path, job: str, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    out.chmod(0o644)
    proc = cli("export", job, "--db", str(db), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert _idx(out.read_text()) == [0, 1, 2]
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == []


def test_a_new_file_gets_the_umasks_mode(db: Path, job: str, tmp_path: Path) -> None:
    out = tmp_path / "new.jsonl"
    old = os.umask(0o027)
    try:
        with replacing(out) as (f, is_file):
            f.write("x\n")
    finally:
        os.umask(old)
    assert is_file and out.read_text() == "x\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


def test_a_symlink_is_written_through_and_kept(db: Path, job: str, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "data.jsonl"
    target.write_text("old\n")
    target.chmod(0o664)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    proc = cli("export", job, "--db", str(db), "-o", str(link))
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert _idx(target.read_text()) == [0, 1, 2]
    assert stat.S_IMODE(target.stat().st_mode) == 0o664
    # A dangling link makes its target.
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "real" / "later.jsonl")
    assert cli("export", job, "--db", str(db), "-o", str(dangling)).returncode == 0
    assert dangling.is_symlink() and _idx((tmp_path / "real" / "later.jsonl").read_text())


def test_a_fifo_is_written_to_and_stays_a_fifo(db: Path, job: str, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    proc = cli("export", job, "--db", str(db), "-o", str(fifo))
    if stat.S_ISFIFO(fifo.lstat().st_mode):
        # Should the export never have opened it, the reader still waits in open(): let it
        # end. Not a blocking open: a reader that has read its end of file (and not yet
        # stored it) no longer holds the FIFO, and that open would wait for ever (ENXIO).
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    reader.join(TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert _idx(got[0].decode()) == [0, 1, 2]


def test_a_link_to_stdout_is_written_to(db: Path, job: str, tmp_path: Path) -> None:
    # /dev/stdout's own kind of link; the machine's is never risked (a root test would
    # replace it if the export were wrong).
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    proc = cli_process("export", job, "--db", str(db), "-o", str(stdout))  # a real fd 1
    assert proc.returncode == 0, proc.stderr
    assert _idx(proc.stdout) == [0, 1, 2]
    assert stdout.is_symlink() and os.readlink(stdout) == "/proc/self/fd/1"


def test_a_directory_or_socket_is_refused_with_exit_2(db: Path, job: str, tmp_path: Path) -> None:
    proc = cli("export", job, "--db", str(db), "-o", str(tmp_path))
    assert proc.returncode == 2 and "directory" in proc.stderr
    import socket

    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        proc = cli("export", job, "--db", str(db), "-o", str(sock_path))
    assert proc.returncode == 2 and "neither a regular file" in proc.stderr
    assert stat.S_ISSOCK(sock_path.lstat().st_mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    with pytest.raises(RuntimeError), replacing(out) as (f, _):
        f.write("new\n")
        raise RuntimeError("cut")
    assert out.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.jsonl"]


_HOLD = """
import sys
from trio_batch._files import replacing
with replacing(sys.argv[1]) as (f, _):
    f.write("half")
    f.flush()
    print("writing", flush=True)
    sys.stdin.read()
"""


def test_the_part_of_a_killed_export_is_removed_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    killed = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    live = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for proc in (killed, live):
            assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
        parts = {p.name for p in tmp_path.iterdir() if p.name.endswith(".part")}
        assert len(parts) == 2
        killed.send_signal(signal.SIGKILL)
        killed.wait(TIMEOUT)
        with replacing(out) as (f, _):
            f.write("whole\n")
        # The killed export's part is gone; the live one's is left to it.
        left = {p.name for p in tmp_path.iterdir() if p.name.endswith(".part")}
        assert len(left) == 1 and left < parts
    finally:
        for proc in (killed, live):
            proc.kill()
            proc.wait(TIMEOUT)
    assert out.read_text() == "whole\n"


@pytest.mark.parametrize(("command", "flag"), [("export", "--after"), ("jobs", "--limit")])
@pytest.mark.parametrize("number", ["99999999999999999999", "-99999999999999999999"])
def test_a_huge_number_is_a_usage_error(
    db: Path, job: str, command: str, flag: str, number: str
) -> None:
    args = [job] if command == "export" else []
    proc = cli(command, *args, "--db", str(db), flag, number)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and flag in proc.stderr


@pytest.mark.parametrize(("command", "flag"), [("export", "--after"), ("jobs", "--limit")])
@pytest.mark.parametrize("number", ["\u0663", "\u00b2", "+1", " 1", "1_0"])
def test_a_number_in_other_than_ascii_digits_is_a_usage_error(
    db: Path, job: str, command: str, flag: str, number: str
) -> None:
    # int() reads an Arabic-Indic 3, a sign, spaces and underscores; the options take digits.
    args = [job] if command == "export" else []
    proc = cli(command, *args, "--db", str(db), flag, number)
    assert proc.returncode == 2, proc.stderr
    assert f"{flag}: expected a whole number from" in proc.stderr


@pytest.mark.parametrize("command", ["export -o", "export", "retry"])
def test_an_export_or_retry_whose_job_is_deleted_midway_fails_and_leaves_the_file(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    with Store.open(db) as store:
        new = NewJob(
            "me",
            "cli",
            [Target(f"https://example.test/{i}") for i in range(300)],
            ttl=3600,
            targets_per_job=300,
            jobs_per_caller=1,
            jobs_total=4,
        )
        made = store.create_job(new)[0].id
        store.finish_job(made, JobState.CANCELLED)
    real = SQLiteJobStore.get_targets_after

    async def forgotten_after_a_page(
        self: SQLiteJobStore, job_id: str, after: int, **kw: Any
    ) -> Any:
        if after >= 0:  # the second page: the job is forgotten just before it is read
            await self.forget_job(job_id, now=kw["now"])
        return await real(self, job_id, after, **kw)

    monkeypatch.setattr(SQLiteJobStore, "get_targets_after", forgotten_after_a_page)
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    name, *rest = command.split()
    args = [name, made, "--db", str(db)] + (["--only", "pending"] if name == "retry" else [])
    assert main(args + ([*rest, str(out)] if rest else [])) != 0
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    with Store.open(db) as store:
        assert store.list_jobs() == []  # no retry made of the part read
