"""``trio-batch export`` (a job's results as JSONL) and the filters of ``trio-batch jobs``."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import IO

import trio

from .._errors import InvalidRequest, JobGone
from .._files import replacing
from .._model import JobState
from .._text import MAX_INDEX
from ..runner import export_line, export_targets
from ..store import JobFilter, JobStore, parse_filter
from ._common import EXIT_DONE, EXIT_FAILED, UsageError, ask, report_error
from ._options import whole_number

__all__ = ["add_export_parser", "add_job_filters", "cmd_export", "job_filter"]


def add_export_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], db: argparse.ArgumentParser
) -> argparse.ArgumentParser:
    """The ``export`` command's parser."""
    export = sub.add_parser(
        "export",
        parents=[db],
        help="write a job's targets and outcomes as JSON Lines, one target a line",
        description="Write one JSON object a line per target, in order: idx, custom_id, url, "
        "status, then result (a success) or error and hint (a failure). Read a page at a "
        "time, so any size of job takes the same memory.",
    )
    export.add_argument("-o", "--output", metavar="FILE", help="write FILE (default: stdout)")
    export.add_argument(
        "--after",
        type=whole_number(-1, MAX_INDEX),
        default=-1,
        metavar="IDX",
        help="start after target IDX (resume)",
    )
    export.add_argument(
        "--merged",
        action="store_true",
        help="show the outcomes of the job's retries (trio-batch retry; up to 16, however "
        "deep, the newest first) in its place",
    )
    return export


def add_job_filters(jobs: argparse.ArgumentParser) -> None:
    """``jobs``' filter flags: they list one caller's jobs (--caller, or yours)."""
    jobs.add_argument(
        "--status",
        action="append",
        default=[],
        choices=[state.value for state in JobState],
        help="only jobs of this status (repeat for several)",
    )
    jobs.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY:VALUE",
        help="only jobs whose metadata has KEY set to VALUE (repeat: all must hold)",
    )
    jobs.add_argument(
        "--created-after",
        default=None,
        metavar="TIME",
        help="only jobs made later: epoch seconds or an ISO 8601 time (UTC without an offset)",
    )


def job_filter(args: argparse.Namespace) -> JobFilter | None:
    """The filter ``jobs``' flags ask for, or None without any; UsageError for a bad one."""
    if not (args.status or args.label or args.created_after is not None):
        return None
    try:
        return parse_filter(args.status, args.label, args.created_after)
    except InvalidRequest as exc:
        raise UsageError(str(exc)) from None


@contextlib.contextmanager
def _output(name: str | None) -> Iterator[tuple[IO[str], bool]]:
    """Where the lines go: stdout, or FILE (see :func:`replacing`: a regular file is made
    whole or not at all). Yields the stream and whether it is a regular file."""
    if name is None:
        yield sys.stdout, False
        return
    with replacing(name) as (out, to_file):
        yield out, to_file


def cmd_export(store: JobStore, args: argparse.Namespace) -> int:
    """``trio-batch export JOB``: 0 once every line is written, 1 for an unknown job or one
    deleted while it was read (a file is then left as it was)."""
    job = ask(store, lambda s: s.get_job(args.job, now=time.time()))
    if job is None:
        report_error(f"no job {args.job} in {store.location} (unknown id, or its lease has lapsed)")
        return EXIT_FAILED

    async def export(out: IO[str], to_file: bool) -> None:
        assert job is not None
        # To a terminal or a pipe: ASCII only, so no byte of a result can drive a terminal.
        async for job_id, target in export_targets(
            store, job, now=time.time(), after=args.after, merged=args.merged
        ):
            line = export_line(job_id, target, merged=args.merged)
            out.write(json.dumps(line, ensure_ascii=not to_file, separators=(",", ":")) + "\n")

    try:
        with _output(args.output) as (out, to_file):
            trio.run(export, out, to_file)
            return EXIT_DONE
    except JobGone as exc:  # a file is left as it was; a pipe has what was read, and exit 1
        report_error(f"{exc}: the export is incomplete")
        return EXIT_FAILED
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
