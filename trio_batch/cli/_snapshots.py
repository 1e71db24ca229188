"""The command line's snapshot options and commands: ``run --snapshot``/``--replay``,
``trio-batch pin``/``unpin``, and the snapshots ``trio-batch gc`` collects.

Where snapshots live: ``--snapshot-dir DIR`` if given, else ``DB.snapshots`` beside a SQLite
database (see :func:`~trio_batch.fetchers.snapshot_root`); a PostgreSQL store needs
``--snapshot-dir``, a directory every runner of the cluster shares.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from .._model import is_job_id
from .._text import parse_count
from ..store import JobStore
from ._common import EXIT_DONE, EXIT_FAILED, UsageError, ask, default_db, report_error

if TYPE_CHECKING:
    # The fetchers (httpx, the worker pool) load when a command uses snapshots, not when the
    # command line starts: ``status`` and ``jobs`` start without them.
    from ..fetchers._recording import Recording
    from ..fetchers._snapshots import SnapshotStore

__all__ = [
    "add_recording_options",
    "add_snapshot_dir",
    "cmd_pin",
    "collect_snapshots",
    "recording",
    "snapshot_store",
]


def _bytes(text: str) -> int:
    count = parse_count(text, max_digits=18)
    if count is None:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes, not {text!r}")
    return count


def add_snapshot_dir(parser: argparse.ArgumentParser) -> None:
    """``--snapshot-dir`` and ``--snapshot-max-bytes``."""
    parser.add_argument(
        "--snapshot-dir",
        metavar="DIR",
        default=None,
        help="where jobs' snapshots live (default: DB.snapshots beside a SQLite database; a "
        "PostgreSQL store needs a directory every runner shares)",
    )
    parser.add_argument(
        "--snapshot-max-bytes",
        type=_bytes,
        default=None,  # the SnapshotStore's own default, DEFAULT_MAX_BYTES
        metavar="N",
        help="bodies kept in the snapshot directory, at most (default: 1073741824, 1 GiB); "
        "a response past it fails its target with SnapshotFull",
    )


def add_recording_options(parser: argparse.ArgumentParser) -> None:
    """``run``'s ``--snapshot``, ``--replay``, ``--on-miss`` and ``--revalidate``."""
    parser.add_argument(
        "--snapshot",
        action="store_true",
        help="keep every target's raw response, so the job can be replayed later",
    )
    parser.add_argument(
        "--replay",
        metavar="JOB",
        default=None,
        help="take each target's response from JOB's snapshot, never the network",
    )
    parser.add_argument(
        "--on-miss",
        choices=["fail", "fetch"],
        default=None,
        help="with --replay, a target missing from the snapshot fails (the default) or is fetched",
    )
    parser.add_argument(
        "--revalidate",
        action="store_true",
        help="with --replay, ask the server whether each page changed (ETag, Last-Modified) "
        "and reuse the kept bytes when it did not",
    )


def recording(args: argparse.Namespace) -> Recording:
    """What ``run``'s options ask of every target; raises :class:`UsageError`."""
    from ..fetchers._recording import Recording

    replay = args.replay or ""
    if replay and not is_job_id(replay):
        raise UsageError(f"--replay takes a job id, not {replay!r}")
    if (args.on_miss or args.revalidate) and not replay:
        raise UsageError("--on-miss and --revalidate go with --replay JOB")
    return Recording(args.snapshot, replay, args.on_miss or "", args.revalidate)


def snapshot_store(args: argparse.Namespace, *, required: bool = False) -> SnapshotStore | None:
    """The snapshot directory of the store ``args.db`` names (the default database without
    it) as ``args`` say; None if there is none (a PostgreSQL store without
    ``--snapshot-dir``), or :class:`UsageError` if ``required``.

    From the ``--db`` the user gave, never the store's ``location``: that is a display text
    (a PostgreSQL store's names its host and database, not its URL)."""
    from ..fetchers._snapshots import DEFAULT_MAX_BYTES, SnapshotStore, snapshot_root

    location = str(args.db if args.db is not None else default_db())
    root = snapshot_root(location, getattr(args, "snapshot_dir", None))
    if root is None:
        if required:
            raise UsageError("a PostgreSQL store keeps snapshots in --snapshot-dir DIR; name it")
        return None
    max_bytes = getattr(args, "snapshot_max_bytes", None)
    return SnapshotStore(root, max_bytes=DEFAULT_MAX_BYTES if max_bytes is None else max_bytes)


def cmd_pin(store: JobStore, args: argparse.Namespace, *, pinned: bool) -> int:
    """``trio-batch pin JOB [--shared]`` / ``unpin JOB``: keep a job's snapshot past its
    lease (``--shared``: any caller may replay it), or let it go with its job."""
    snaps = snapshot_store(args, required=True)
    assert snaps is not None
    job = ask(store, lambda s: s.get_job(args.job, now=time.time()))
    owner = snaps.owner_sync(args.job)
    if owner is None or (pinned and job is None and not owner.pinned):
        report_error(f"no snapshot of job {args.job} in {snaps.root} (or its lease has lapsed)")
        return EXIT_FAILED
    snaps.set_pin(args.job, pinned=pinned, shared=bool(getattr(args, "shared", False)))
    if pinned:
        who = "any caller" if args.shared else f"{owner.caller} only"
        print(f"pinned job {args.job}: its snapshot is kept until unpinned; replayable by {who}")
    else:
        print(f"unpinned job {args.job}: its snapshot goes with the job's lease")
    return EXIT_DONE


def collect_snapshots(store: JobStore, args: argparse.Namespace) -> tuple[int, int] | None:
    """Delete the snapshots of lapsed, unpinned jobs and the bodies nothing names (``gc``);
    None if the store has no snapshot directory."""
    snaps = snapshot_store(args)
    if snaps is None or not snaps.root.exists():
        return None

    async def alive(job_id: str) -> bool:
        return await store.get_job(job_id, now=time.time()) is not None

    return ask(store, lambda s: snaps.collect(alive))
