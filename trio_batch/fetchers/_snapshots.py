"""Snapshots: the raw responses of a job's targets, kept on disk so that the job can be replayed.

A job whose targets have the option ``snapshot`` keeps each target's response as it arrived,
before any processing: status, reason, HTTP version, headers, and the body (after content
decoding, the bytes processing reads and ``meta["sha256"]`` hashes). Laid out in one directory,
shared by every runner of a cluster::

    ROOT/
      blobs/ab/abcdef...        a body, named by its sha256: the same bytes are kept once
      jobs/JOB/owner.json       the job's caller; written with its first response
      jobs/JOB/pin.json         present while the job is pinned: {"shared": true|false}
      jobs/JOB/targets/HASH.json  one target's response (HASH: the sha256 of its URL)

Where ROOT is: beside a SQLite database, ``DB.snapshots/`` (:func:`snapshot_root`); for a
PostgreSQL store, the directory ``--snapshot-dir`` names, one every runner mounts.

Every file is written to a temporary name and renamed into place, the body before the entry
that names it: a reader never sees half a file, nor an entry whose body is missing. Bodies
count against ``max_bytes`` (:data:`DEFAULT_MAX_BYTES`); a response that would pass it fails
its target with :class:`SnapshotFull`. A job's snapshot lives as long as its job's lease;
:meth:`SnapshotStore.collect` (run by ``trio-batch gc`` and by ``serve``'s purge) deletes the
snapshots of jobs that are gone unless they are pinned, then the bodies nothing names.

Disk I/O runs in worker threads. Cancellation: a write in progress completes (its thread is
not abandoned), so a cancelled fetch leaves a complete entry or none.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from .._files import read_bounded
from .._model import is_job_id
from .._text import check_whole
from ..store._open import _sqlite_url  # the one parser of sqlite: URLs
from ._body import Body
from ._errors import FetchError
from ._snapshot_entry import Entry, url_key

__all__ = [
    "BLOB_GRACE",
    "DEFAULT_MAX_BYTES",
    "Owner",
    "SnapshotError",
    "SnapshotFull",
    "SnapshotMiss",
    "SnapshotStore",
    "snapshot_root",
]

#: The default bound on the bodies one snapshot directory keeps: 1 GiB.
DEFAULT_MAX_BYTES = 1024**3
#: Largest entry or owner file read back (headers are bounded by the HTTP parser well below).
_MAX_ENTRY_BYTES = 1024 * 1024
#: Seconds a body no entry names is kept before it is collected: a runner may have written one
#: whose entry is still to come.
BLOB_GRACE = 3600.0


class SnapshotError(FetchError):
    """A snapshot could not be written or read (a disk error, a damaged file)."""


class SnapshotFull(SnapshotError):
    """Keeping a response would take the snapshot directory past its bound on disk."""


class SnapshotMiss(FetchError):
    """A replayed target is not in the snapshot it is replayed from."""


def snapshot_root(location: str, snapshot_dir: str | None = None) -> Path | None:
    """Where the snapshots of the store at ``location`` live: ``snapshot_dir`` if given, else
    ``DB.snapshots`` beside a SQLite database; None for a PostgreSQL store without one."""
    if snapshot_dir:
        return Path(snapshot_dir)
    scheme = location.split(":", 1)[0].lower()
    if scheme in ("postgresql", "postgres"):
        return None
    if scheme == "sqlite":
        location = _sqlite_url(location)[0]
    if location == ":memory:":
        return None
    return Path(location + ".snapshots")


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose a snapshot is, and whether it is pinned (kept past its job) and shared."""

    caller: str
    pinned: bool = False
    shared: bool = False

    def readable_by(self, caller: str | None) -> bool:
        """True if ``caller`` may replay this snapshot: its own, or pinned and shared."""
        return caller == self.caller or (self.pinned and self.shared)


class SnapshotStore:
    """The snapshot directory at ``root``, its bodies bounded by ``max_bytes`` in all.

    Safe to share between trio runs, threads and processes (every runner of a cluster). The
    bound is checked against what this process last counted on disk plus what it wrote since:
    several runners writing at once may each pass it by at most the responses in flight.
    """

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES):
        # A NaN bound let every body in: no comparison with NaN is true.
        check_whole("max_bytes", max_bytes)
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._used: int | None = None  # bytes of bodies on disk, counted once, then tracked

    def __repr__(self) -> str:
        return f"SnapshotStore({str(self.root)!r}, max_bytes={self.max_bytes!r})"

    # ---------------------------------------------------------------------------------------
    # Paths

    def _job_dir(self, job_id: str) -> Path:
        if not is_job_id(job_id):  # never a path of the caller's choosing
            raise ValueError(f"{job_id!r} is not a job id")
        return self.root / "jobs" / job_id

    def blob_path(self, sha: str) -> Path:
        """Where the body of sha256 ``sha`` is kept."""
        return self.root / "blobs" / sha[:2] / sha

    # ---------------------------------------------------------------------------------------
    # Async API (each call one worker thread, never abandoned)

    async def record(
        self, job_id: str, caller: str, url: str, body: Body, fetched_at: float
    ) -> Entry:
        """Keep ``body``, the response to ``url``, in ``job_id``'s snapshot (``caller``'s).

        Raises :class:`SnapshotFull` past the bound, :class:`SnapshotError` for a disk error.
        """
        entry = Entry.of(url, body, fetched_at)
        await trio.to_thread.run_sync(self.record_sync, job_id, caller, entry, body.data)
        return entry

    async def lookup(self, job_id: str, url: str, max_bytes: int) -> tuple[Entry, bytes] | None:
        """``url``'s entry in ``job_id``'s snapshot and its body, or None if it has none.

        Raises :class:`SnapshotError` for a damaged entry or body, or one over ``max_bytes``.
        """
        return await trio.to_thread.run_sync(self.lookup_sync, job_id, url, max_bytes)

    async def owner(self, job_id: str) -> Owner | None:
        """Whose ``job_id``'s snapshot is, or None if the job has none."""
        return await trio.to_thread.run_sync(self.owner_sync, job_id)

    async def collect(
        self, alive: Callable[[str], Awaitable[bool]], *, grace: float = BLOB_GRACE
    ) -> tuple[int, int]:
        """Delete the snapshots of jobs ``alive`` says are gone, unless pinned, then the bodies
        no entry names that are older than ``grace`` seconds (a runner may have written one
        whose entry is still to come). Returns (snapshots, bodies) deleted.

        Cancellation: stops between jobs; what was deleted stays deleted, nothing is half
        deleted that a replay could read (the owner file goes last).
        """
        removed = 0
        for job_id in await trio.to_thread.run_sync(self.job_ids):
            owner = await self.owner(job_id)
            if owner is not None and owner.pinned:
                continue
            # Pinned while ``alive`` was awaited: the pin won, the snapshot stays.
            if not await alive(job_id) and await trio.to_thread.run_sync(
                self.remove_unless_pinned, job_id
            ):
                removed += 1
        before = time.time() - grace
        await trio.to_thread.run_sync(self.remove_stale_imports, before)
        bodies = await trio.to_thread.run_sync(self.sweep_sync, before)
        return removed, bodies

    # ---------------------------------------------------------------------------------------
    # Sync parts

    def record_sync(self, job_id: str, caller: str, entry: Entry, data: bytes) -> None:
        """:meth:`record`'s work, in the calling thread."""
        job_dir = self._job_dir(job_id)
        try:
            self.keep_body(entry.sha256, data)
            owner_file = job_dir / "owner.json"
            if not owner_file.exists():
                _write_atomic(owner_file, _dump({"caller": caller}))
            _write_atomic(
                job_dir / "targets" / f"{url_key(entry.url)}.json", _dump(entry.to_json())
            )
        except OSError as exc:
            raise SnapshotError(
                f"cannot keep the response of {entry.url} in {self.root}: {exc.strerror or exc}",
                hint="check that the snapshot directory is writable and its disk not full",
            ) from None

    def lookup_sync(self, job_id: str, url: str, max_bytes: int) -> tuple[Entry, bytes] | None:
        """:meth:`lookup`'s work, in the calling thread."""
        path = self._job_dir(job_id) / "targets" / f"{url_key(url)}.json"
        try:
            raw = read_bounded(path, _MAX_ENTRY_BYTES)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise damaged(job_id, url, str(exc)) from None
        try:
            entry = Entry.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise damaged(job_id, url, f"its entry is not one ({exc})") from None
        if entry.url != url:  # two URLs of one hash: never in practice, never served wrong
            return None
        if entry.size > max_bytes:
            raise SnapshotError(
                f"the kept body of {url} is {entry.size} bytes, more than the fetcher's "
                f"max_bytes ({max_bytes})",
                hint="replay with a fetcher whose max_bytes is at least the recording's",
            )
        try:
            data = read_bounded(self.blob_path(entry.sha256), max_bytes)
        except (OSError, ValueError) as exc:
            raise damaged(job_id, url, f"its body is missing or unreadable ({exc})") from None
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise damaged(job_id, url, "its body does not match its sha256")
        return entry, data

    def owner_sync(self, job_id: str) -> Owner | None:
        """:meth:`owner`'s work, in the calling thread."""
        if not is_job_id(job_id):
            return None
        job_dir = self._job_dir(job_id)
        try:
            caller = json.loads(read_bounded(job_dir / "owner.json", _MAX_ENTRY_BYTES))["caller"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            return None  # a damaged owner file: nobody's, so nobody replays it
        try:
            pin = json.loads(read_bounded(job_dir / "pin.json", _MAX_ENTRY_BYTES))
        except FileNotFoundError:
            return Owner(str(caller))
        except (OSError, ValueError):
            pin = {}
        return Owner(str(caller), pinned=True, shared=bool(pin.get("shared", False)))

    def set_pin(self, job_id: str, *, pinned: bool, shared: bool = False) -> bool:
        """Pin ``job_id``'s snapshot (kept past its job; ``shared``: any caller may replay
        it) or unpin it. Returns False if the job has no snapshot."""
        job_dir = self._job_dir(job_id)
        with self._lock:  # against a collect removing it between the check and the write
            if not (job_dir / "owner.json").exists():
                return False
            if pinned:
                _write_atomic(job_dir / "pin.json", _dump({"shared": shared}))
            else:
                with contextlib.suppress(FileNotFoundError):
                    (job_dir / "pin.json").unlink()
        return True

    def entries(self, job_id: str) -> Iterator[Entry]:
        """Every entry of ``job_id``'s snapshot, in the order of their file names."""
        targets = self._job_dir(job_id) / "targets"
        try:
            names = sorted(p.name for p in targets.iterdir() if p.suffix == ".json")
        except FileNotFoundError:
            return
        for name in names:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                yield Entry.from_json(json.loads(read_bounded(targets / name, _MAX_ENTRY_BYTES)))

    def job_ids(self) -> list[str]:
        """The ids of the jobs that have a snapshot directory."""
        try:
            return sorted(p.name for p in (self.root / "jobs").iterdir() if is_job_id(p.name))
        except FileNotFoundError:
            return []

    def remove_sync(self, job_id: str) -> None:
        """Delete ``job_id``'s snapshot: the owner file first, so nobody replays half of it."""
        job_dir = self._job_dir(job_id)
        with contextlib.suppress(FileNotFoundError):
            (job_dir / "owner.json").unlink()
        shutil.rmtree(job_dir, ignore_errors=True)

    def remove_unless_pinned(self, job_id: str) -> bool:
        """Delete ``job_id``'s snapshot unless it is pinned now (checked with pins held off,
        in this process); returns True if it was deleted."""
        with self._lock:
            if (self._job_dir(job_id) / "pin.json").exists():
                return False
            self.remove_sync(job_id)
        return True

    def sweep_sync(self, before: float) -> int:
        """Delete the bodies no entry names, last touched before ``before`` (epoch seconds);
        returns how many."""
        named = {entry.sha256 for job_id in self.job_ids() for entry in self.entries(job_id)}
        removed = 0
        blobs = self.root / "blobs"
        with self._lock:
            for path in blobs.glob("*/*") if blobs.exists() else ():
                try:
                    info = path.stat()
                except FileNotFoundError:
                    continue
                if path.name in named or info.st_mtime >= before:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed += 1
            self._used = None  # counted afresh at the next write
        return removed

    def used_bytes(self) -> int:
        """Bytes of bodies on disk (as of the last count, plus this process's writes)."""
        with self._lock:
            return self._count()

    def _count(self) -> int:
        if self._used is None:
            blobs = self.root / "blobs"
            total = 0
            for path in blobs.glob("*/*") if blobs.exists() else ():
                with contextlib.suppress(FileNotFoundError):
                    total += path.stat().st_size
            self._used = total
        return self._used

    def keep_body(self, sha: str, data: bytes) -> bool:
        """Keep ``data``, whose sha256 is ``sha``, unless it is kept already; returns True if
        this call wrote it. Raises :class:`SnapshotFull` past the bound, OSError."""
        path = self.blob_path(sha)
        with self._lock:
            if path.exists():
                os.utime(path)  # fresh again: the sweep's grace covers the entry to come
                return False
            used = self._count()
            if used + len(data) > self.max_bytes:
                raise SnapshotFull(
                    f"keeping {len(data)} more bytes would take the snapshots in {self.root} "
                    f"past their bound of {self.max_bytes} bytes ({used} in use)",
                    hint="unpin or forget old snapshots and run `trio-batch gc`, or raise the "
                    "bound (--snapshot-max-bytes)",
                )
            _write_atomic(path, data)
            self._used = used + len(data)
            return True

    def forget_body(self, sha: str) -> None:
        """Delete the body ``sha`` (an import that failed wrote it; nothing names it)."""
        path = self.blob_path(sha)
        with self._lock, contextlib.suppress(FileNotFoundError):
            size = path.stat().st_size
            path.unlink()
            if self._used is not None:
                self._used -= size

    def write_entry(self, path: Path, entry: Entry) -> None:
        """Write ``entry`` to ``path`` (a staging directory's), whole or not at all."""
        _write_atomic(path, _dump(entry.to_json()))

    def commit_import(self, staging: Path, job_id: str, caller: str) -> None:
        """Make the staged snapshot ``staging`` the pinned snapshot ``job_id`` of ``caller``,
        in one rename: it appears whole or not at all."""
        _write_atomic(staging / "owner.json", _dump({"caller": caller}))
        _write_atomic(staging / "pin.json", _dump({"shared": False}))
        os.rename(staging, self._job_dir(job_id))

    def remove_staging(self, staging: Path) -> None:
        """Delete a staged import that did not complete."""
        shutil.rmtree(staging, ignore_errors=True)

    def remove_stale_imports(self, before: float) -> None:
        """Delete staged imports last changed before ``before``: a killed import's leftovers."""
        for staging in (self.root / "jobs").glob(".import-*"):
            with contextlib.suppress(FileNotFoundError):
                if staging.stat().st_mtime < before:
                    shutil.rmtree(staging, ignore_errors=True)


def damaged(job_id: str, url: str, why: str) -> SnapshotError:
    """The error for ``job_id``'s snapshot failing to give ``url``'s response, and why."""
    return SnapshotError(
        f"the snapshot of job {job_id} cannot give {url}: {why}",
        hint="the snapshot directory was changed by hand or its disk is failing; record the "
        "job again",
    )


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
