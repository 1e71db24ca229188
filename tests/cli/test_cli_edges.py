"""The command line's documented promises at their edges: a ``--db`` path shown as it is
(rich markup characters and all), a byte-order mark dropped from a batch file, and export to
a pipe written as ASCII, so fetched controls cannot reach a terminal."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from ..support.local_server import CONTROLS, LocalServer, server
from .test_cli import _env, cli, write_batch
from .test_cli_hostile import RAW

__all__ = ["server"]  # the fixture, imported for pytest


def test_a_db_path_with_brackets_is_shown_as_it_is_in_every_hint(
    server: LocalServer, tmp_path: Path
) -> None:
    folder = tmp_path / "[red]runs[b]"
    folder.mkdir()
    db = folder / "jobs[1].db"
    batch = write_batch(tmp_path / "urls.txt", [server.url("/text.txt")])
    wide = _env(COLUMNS="400")
    first = cli("run", str(batch), "--db", str(db), env=wide)
    assert first.returncode == 0, first.stderr
    shown = f"--db {shlex.quote(str(db))}"
    assert "full results: trio-batch results" in first.stdout
    assert first.stdout.rstrip().endswith(shown)
    again = cli("run", str(batch), "--db", str(db), env=wide)
    assert again.returncode == 0, again.stderr
    assert f"{shown}` (or use another --caller)" in again.stderr  # copied, it works


@pytest.mark.parametrize("shape", ["lines", "array"])
def test_a_byte_order_mark_is_dropped_from_a_batch_file(
    server: LocalServer, tmp_path: Path, shape: str
) -> None:
    url = server.url("/text.txt")
    # An indented comment is a comment too.
    text = f"  # the feed\n{url}\n" if shape == "lines" else json.dumps([{"url": url}])
    batch = tmp_path / "urls.txt"
    batch.write_bytes(b"\xef\xbb\xbf" + text.encode())
    run = cli("run", str(batch), "--db", str(tmp_path / "b.db"), "--json")
    assert run.returncode == 0, run.stderr
    [target] = json.loads(run.stdout)["targets"]
    assert target["url"] == url and target["status"] == "done"


def test_export_to_a_pipe_escapes_c1_controls_and_bidi_overrides(
    server: LocalServer, tmp_path: Path
) -> None:
    db = tmp_path / "b.db"
    batch = write_batch(tmp_path / "urls.txt", [server.url("/controls.txt")])
    run = cli("run", str(batch), "--db", str(db), "--json")
    job_id = json.loads(run.stdout)["job"]["id"]
    export = cli("export", job_id, "--db", str(db))
    assert export.returncode == 0, export.stderr
    assert export.stdout.isascii()
    for raw in RAW:
        assert raw not in export.stdout
    [line] = export.stdout.splitlines()
    assert json.loads(line)["result"]["content"] == CONTROLS  # the same value, escaped
    # To a file, the text is kept as UTF-8: only a terminal needs the escapes.
    out = tmp_path / "out.jsonl"
    assert cli("export", job_id, "--db", str(db), "-o", str(out)).returncode == 0
    assert json.loads(out.read_text(encoding="utf-8"))["result"]["content"] == CONTROLS
    assert "\u202e" in out.read_text(encoding="utf-8")
