"""``trio-batch export JOB --warc -o FILE`` and ``trio-batch import-warc FILE``: a job's
snapshot as a WARC/1.1 file, and a WARC file as a snapshot to replay (the ``warc`` extra)."""

from __future__ import annotations

import argparse
import sys

from .._files import replacing
from .._text import printable
from ..store import JobStore
from ._common import EXIT_DONE, EXIT_FAILED, UsageError, report_error
from ._options import caller_name
from ._run import default_caller
from ._snapshots import add_snapshot_dir, snapshot_store

__all__ = ["add_import_parser", "cmd_export_warc", "cmd_import_warc"]


def _needs_warcio() -> None:
    try:
        import warcio  # noqa: F401
    except ImportError:
        raise UsageError("WARC files need the warc extra: pip install 'trio-batch[warc]'") from None


def add_import_parser(sub: argparse._SubParsersAction, db: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    """The ``import-warc`` command."""
    parser = sub.add_parser(
        "import-warc",
        parents=[db],
        help="turn a WARC file into a snapshot that --replay can use",
        description="Read FILE (WARC, .warc or .warc.gz) and keep every response record as a "
        "new snapshot, pinned, replayable by --caller (with --shared, by anyone). Prints its "
        "id: `trio-batch run BATCH --replay ID` then fetches nothing. A truncated or malformed "
        "file is refused (exit 2) naming the record, and nothing of it is kept.",
    )
    parser.add_argument("file", metavar="FILE", help="the WARC file")
    parser.add_argument(
        "--caller", type=caller_name(), default=None, help="whose snapshot (default: your login)"
    )
    parser.add_argument("--shared", action="store_true", help="let any caller replay it")
    add_snapshot_dir(parser)


def cmd_import_warc(args: argparse.Namespace) -> int:
    """``trio-batch import-warc FILE``: 0 and the snapshot's id, 2 for a file refused."""
    from ..fetchers import HttpFetcher, SnapshotError
    from ..fetchers._warc import WarcError, import_warc

    _needs_warcio()
    snaps = snapshot_store(args, required=True)
    assert snaps is not None
    caller = args.caller if args.caller is not None else default_caller()
    try:
        # The largest body taken from one record: the fetcher's.
        max_bytes = HttpFetcher().max_bytes
        job_id, count = import_warc(snaps, args.file, caller, max_bytes=max_bytes)
    except (WarcError, SnapshotError) as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot import {args.file}: {exc.strerror or exc}") from None
    if args.shared:
        snaps.set_pin(job_id, pinned=True, shared=True)
    print(f"imported {count} response(s) from {printable(args.file)} as snapshot {job_id}")
    print(f"replay it: trio-batch run BATCH --replay {job_id}")
    return EXIT_DONE


def cmd_export_warc(store: JobStore, args: argparse.Namespace) -> int:
    """``trio-batch export JOB --warc -o FILE``: FILE made whole or not at all (see
    :func:`~trio_batch._files.replacing`); 1 for a job with no snapshot."""
    from ..fetchers import SnapshotError
    from ..fetchers._warc import warc_records

    _needs_warcio()
    if args.output is None and sys.stdout.isatty():
        raise UsageError("a WARC file is binary: write it with -o FILE (or pipe it)")
    snaps = snapshot_store(args, required=True)
    assert snaps is not None
    if snaps.owner_sync(args.job) is None:
        report_error(f"no snapshot of job {args.job} in {snaps.root}")
        return EXIT_FAILED
    try:
        records = warc_records(snaps, args.job)
        if args.output is None:
            for record in records:
                sys.stdout.buffer.write(record)
            sys.stdout.buffer.flush()
            return EXIT_DONE
        with replacing(args.output, binary=True) as (out, _):
            for record in records:
                out.write(record)
    except SnapshotError as exc:  # a body gone from the directory: no FILE is made
        report_error(f"{exc}; {exc.hint}")
        return EXIT_FAILED
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    return EXIT_DONE
