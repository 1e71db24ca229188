"""``trio-batch run --snapshot`` / ``--replay``, ``pin`` and ``gc``, run for real in a subprocess;
the replay runs with the fake site stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..support.local_server import HTML, LocalServer, server
from .test_cli import cli, write_batch

__all__ = ["server"]  # the fixture, imported for pytest


def _run_json(*args: str) -> tuple[int, dict[str, object], str]:
    done = cli("run", *args, "--json", "-q", "--retries", "0")
    return done.returncode, json.loads(done.stdout) if done.stdout else {}, done.stderr


def test_record_then_replay_offline_with_new_options(server: LocalServer, tmp_path: Path) -> None:
    db = tmp_path / "batch.db"
    batch = write_batch(tmp_path / "batch.txt", [server.url("/page.html")])
    code, out, err = _run_json(str(batch), "--db", str(db), "--snapshot")
    assert code == 0, err
    job = out["job"]
    assert isinstance(job, dict)
    recorded = job["id"]
    assert (tmp_path / "batch.db.snapshots" / "jobs" / recorded / "owner.json").exists()
    server.shutdown()
    server.server_close()
    grep = write_batch(
        tmp_path / "grep.txt",
        [{"url": server.url("/page.html"), "options": {"mode": "text", "grep": "apples"}}],
    )
    code, out, err = _run_json(str(grep), "--db", str(db), "--replay", recorded)
    assert code == 0, err
    (target,) = out["targets"]  # type: ignore[misc]
    assert target["result"]["content"] == "The first paragraph mentions apples."
    assert target["result"]["meta"]["replayed"] is True
    assert target["options"]["replay"] == recorded


def test_bad_replays_exit_2_at_submit_saying_which(server: LocalServer, tmp_path: Path) -> None:
    db = tmp_path / "batch.db"
    batch = write_batch(tmp_path / "batch.txt", [server.url("/page.html")])
    code, out, err = _run_json(str(batch), "--db", str(db), "--snapshot", "--caller", "alice")
    assert code == 0, err
    job = out["job"]
    assert isinstance(job, dict)
    alices = job["id"]
    code, out, _ = _run_json(str(batch), "--db", str(db), "--caller", "alice")
    plain = out["job"]["id"]  # type: ignore[index]
    before = server.count("/page.html")

    def refused(caller: str, job_id: str) -> str:
        done = cli("run", str(batch), "--db", str(db), "--caller", caller, "--replay", job_id)
        assert done.returncode == 2, done.stderr
        return done.stderr

    unknown = "Q" * 22
    assert f"no job {unknown} to replay (unknown id" in refused("bob", unknown)
    assert refused("bob", alices) == refused("bob", unknown).replace(unknown, alices)
    assert f"job {plain} has no snapshot to replay" in refused("alice", plain)
    assert server.count("/page.html") == before  # nothing fetched, nothing submitted
    done = cli("run", str(batch), "--db", str(db), "--on-miss", "fetch")
    assert done.returncode == 2 and "--on-miss and --revalidate go with --replay" in done.stderr
    # Pinned and shared, Alice's snapshot is Bob's to replay.
    done = cli("pin", alices, "--shared", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert "replayable by any caller" in done.stdout
    code, out, err = _run_json(str(batch), "--db", str(db), "--caller", "bob", "--replay", alices)
    assert code == 0, err
    assert out["targets"][0]["result"]["meta"]["replayed"] is True  # type: ignore[index]
    done = cli("unpin", alices, "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert refused("bob", alices) == refused("bob", unknown).replace(unknown, alices)


def test_gc_deletes_only_unpinned_snapshots_of_gone_jobs(
    server: LocalServer, tmp_path: Path
) -> None:
    db = tmp_path / "batch.db"
    snaps = tmp_path / "batch.db.snapshots" / "jobs"
    ids = []
    for name in ("page.html", "text.txt"):
        batch = write_batch(tmp_path / f"{name}.txt", [server.url(f"/{name}")])
        code, out, err = _run_json(str(batch), "--db", str(db), "--snapshot")
        assert code == 0, err
        ids.append(out["job"]["id"])  # type: ignore[index]
    kept, dropped = ids
    assert cli("pin", kept, "--db", str(db)).returncode == 0
    done = cli("gc", "--db", str(db))
    assert done.returncode == 0 and "deleted 0 snapshot(s)" in done.stdout  # both jobs live
    for job_id in ids:  # gone, as a lapsed lease leaves them
        assert cli("forget", job_id, "--db", str(db)).returncode == 0
    done = cli("gc", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert "deleted 1 snapshot(s)" in done.stdout
    assert sorted(p.name for p in snaps.iterdir()) == [kept]
    assert dropped not in done.stdout


def test_export_warc_then_import_on_another_machine_and_replay(
    server: LocalServer, tmp_path: Path
) -> None:
    db = tmp_path / "here" / "batch.db"
    db.parent.mkdir()
    batch = write_batch(tmp_path / "batch.txt", [server.url("/page.html")])
    code, out, err = _run_json(str(batch), "--db", str(db), "--snapshot")
    assert code == 0, err
    recorded = out["job"]["id"]  # type: ignore[index]
    warc = tmp_path / "job.warc.gz"
    done = cli("export", recorded, "--warc", "-o", str(warc), "--db", str(db))
    assert done.returncode == 0, done.stderr
    server.shutdown()
    server.server_close()
    there = tmp_path / "there" / "batch.db"
    there.parent.mkdir()
    done = cli("import-warc", str(warc), "--db", str(there), "--caller", "carol")
    assert done.returncode == 0, done.stderr
    imported = done.stdout.split("as snapshot ")[1].split()[0]
    code, out, err = _run_json(
        str(batch), "--db", str(there), "--caller", "carol", "--replay", imported
    )
    assert code == 0, err
    result = out["targets"][0]["result"]  # type: ignore[index]
    assert result["meta"]["replayed"] is True
    assert result["content"] == HTML
    # A cut file: exit 2, the record named, nothing kept.
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(warc.read_bytes()[:100])
    done = cli("import-warc", str(cut), "--db", str(there), "--caller", "carol")
    assert done.returncode == 2
    assert "is cut short: gzip member 1 (the record at byte 0) does not end" in done.stderr
    assert len(list((tmp_path / "there" / "batch.db.snapshots" / "jobs").iterdir())) == 1


def test_on_postgresql_snapshots_live_in_the_shared_snapshot_dir(
    server: LocalServer, tmp_path: Path, pg_dsn: str
) -> None:
    batch = write_batch(tmp_path / "batch.txt", [server.url("/page.html")])
    done = cli("run", str(batch), "--db", pg_dsn, "--snapshot", "--quiet")
    assert done.returncode == 2
    assert "needs a snapshot directory" in done.stderr and "--snapshot-dir" in done.stderr
    shared = tmp_path / "shared"
    code, out, err = _run_json(
        str(batch), "--db", pg_dsn, "--snapshot", "--snapshot-dir", str(shared)
    )
    assert code == 0, err
    recorded = out["job"]["id"]  # type: ignore[index]
    assert (shared / "jobs" / recorded / "owner.json").exists()
    server.shutdown()
    server.server_close()
    grep = write_batch(
        tmp_path / "grep.txt",
        [{"url": server.url("/page.html"), "options": {"mode": "text", "grep": "pears"}}],
    )
    code, out, err = _run_json(
        str(grep), "--db", pg_dsn, "--snapshot-dir", str(shared), "--replay", recorded
    )
    assert code == 0, err
    result = out["targets"][0]["result"]  # type: ignore[index]
    assert result["content"] == "The second paragraph mentions pears."
    assert result["meta"]["replayed"] is True


def test_the_help_names_the_snapshot_stores_own_default() -> None:
    # The option's default is the store's (None on the command line), so the help says it.
    from trio_batch.fetchers._snapshots import DEFAULT_MAX_BYTES

    assert DEFAULT_MAX_BYTES == 1024**3
    shown = " ".join(cli("run", "--help").stdout.split())  # as wrapped for any width
    assert f"(default: {DEFAULT_MAX_BYTES}, 1 GiB)" in shown


def test_export_warc_replaces_a_file_as_export_does(server: LocalServer, tmp_path: Path) -> None:
    # Through the symlink to its target, the link kept, and with the file's own mode.
    db = tmp_path / "batch.db"
    batch = write_batch(tmp_path / "batch.txt", [server.url("/page.html")])
    code, out, err = _run_json(str(batch), "--db", str(db), "--snapshot")
    assert code == 0, err
    recorded = out["job"]["id"]  # type: ignore[index]
    warc = tmp_path / "job.warc.gz"
    warc.write_bytes(b"old")
    warc.chmod(0o644)
    link = tmp_path / "link.warc.gz"
    link.symlink_to(warc)
    done = cli("export", recorded, "--warc", "-o", str(link), "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and warc.read_bytes()[:2] == b"\x1f\x8b"  # gzip
    assert warc.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("to_file", [True, False], ids=["-o FILE", "stdout"])
def test_export_warc_of_a_snapshot_missing_its_body_says_so(
    server: LocalServer, tmp_path: Path, to_file: bool
) -> None:
    db = tmp_path / "batch.db"
    batch = write_batch(tmp_path / "batch.txt", [server.url("/page.html")])
    code, out, err = _run_json(str(batch), "--db", str(db), "--snapshot")
    assert code == 0, err
    recorded = out["job"]["id"]  # type: ignore[index]
    [blob] = [p for p in tmp_path.rglob("blobs/*/*") if p.is_file()]
    blob.unlink()  # a snapshot directory damaged by hand
    warc = tmp_path / "job.warc.gz"
    output = ["-o", str(warc)] if to_file else []
    done = cli("export", recorded, "--warc", *output, "--db", str(db))
    assert done.returncode == 1, done.stderr
    assert f"the snapshot of job {recorded} cannot give" in done.stderr
    assert "its body is missing or unreadable (No such file or directory)" in done.stderr
    assert "cannot write" not in done.stderr and "Traceback" not in done.stderr
    assert not warc.exists()
