"""The ``trio-batch`` command: run a batch file, then inspect jobs and results.

::

    trio-batch run FILE [--db PATH] [--caller NAME] [--class NAME] [--json] [--quiet]
    trio-batch status JOB [--db PATH]
    trio-batch results JOB [--db PATH] [--json]
    trio-batch jobs [--db PATH] [--caller NAME] [--json]
    trio-batch forget JOB [--db PATH]
    trio-batch gc [--db PATH]
    trio-batch pin JOB [--shared] / unpin JOB
    trio-batch export JOB --warc -o FILE / import-warc FILE

Also ``python -m trio_batch``. Exit codes: 0 the job is done; 1 it ended partial or failed (or,
for the other commands, the job does not exist); 2 a usage or input error; 3 another run holds
the database (nothing was submitted; try again when it ends); 130 the job was cancelled with
Ctrl-C.

Argument parsing uses :mod:`argparse`: five subcommands with a handful of options each need
nothing more, it keeps the command free of another dependency, and its usage errors already
exit with status 2, the code this command promises for them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from .._config import Config
from .._errors import BatchError
from .._model import is_job_id
from .._text import MAX_INDEX, parse_count
from .._version import __version__
from ._batch_data import add_export_parser, add_job_filters, cmd_export
from ._common import (
    EXIT_BUSY,
    EXIT_CANCELLED,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_USAGE,
    UsageError,
    db_target,
    default_db,
    open_db,
    report_error,
    stderr_console,
)
from ._inspect import cmd_forget, cmd_gc, cmd_jobs, cmd_results, cmd_status
from ._logs import add_log_format_argument
from ._options import (
    add_fetch_limits,
    add_politeness,
    add_store_options,
    caller_name,
    positive_number,
    whole_number,
)
from ._run import DEFAULT_MAX_TARGETS, cmd_retry, cmd_run
from ._snapshots import add_recording_options, add_snapshot_dir, cmd_pin
from ._telemetry import add_otel_argument
from ._warc import add_import_parser, cmd_export_warc, cmd_import_warc

__all__ = [
    "EXIT_BUSY",
    "EXIT_CANCELLED",
    "EXIT_DONE",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "default_db",
    "main",
]


_EPILOG = """\
exit codes: 0 done, 1 partial or failed (or no such job), 2 usage or input error,
3 another run holds the database (nothing submitted), 130 cancelled with Ctrl-C.

database: every command takes --db PATH. Without it, $TRIO_BATCH_DB is used, else
trio-batch.db in your user data directory (on Linux ~/.local/share/trio-batch/). A per-user
file rather than ./trio-batch.db, so that re-running a batch, `status` and `results` find your
jobs whichever directory you run them from, and no database files are scattered over (or
committed with) your project folders. Pass --db ./trio-batch.db to keep one per project.
"""


# --------------------------------------------------------------------------------------------
# Argument parsing


def _parser() -> argparse.ArgumentParser:
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument(
        "--db",
        metavar="PATH|URL",
        type=db_target,
        help="SQLite database, or a postgresql:// URL (default: $TRIO_BATCH_DB, else "
        "trio-batch.db in your user data directory; see `trio-batch --help`)",
    )
    parser = argparse.ArgumentParser(
        prog="trio-batch",
        description="Run batches of URL fetches with trio and keep every result in SQLite.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        parents=[db],
        help="submit a batch file and fetch it, showing progress",
        description="Submit the targets in FILE as one job and fetch them one by one, showing "
        "progress, then print a table of the outcomes. Running the same file again (same "
        "caller) while the job's lease lasts fetches nothing: it shows the stored job. "
        "Ctrl-C cancels: the target being fetched finishes and is stored, the rest stay "
        "pending, and the exit code is 130; a second Ctrl-C stops at once.",
        epilog="FILE formats: a JSON array of targets; or one target per line, either a JSON "
        'object {"url": ..., "options": {...}} or a bare URL (lines starting with # are '
        "comments). Options: mode (raw|text|markdown|main), grep, context, jq, pages.\n\n"
        + _EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("file", metavar="FILE", help="the batch file, or - for standard input")
    _add_submitter_options(run)
    _add_fetch_options(run)
    add_recording_options(run)

    retry = sub.add_parser(
        "retry",
        parents=[db],
        help="fetch an ended job's failed targets again, as a new job",
        description="Submit the failed targets of the ended job JOB (with --only "
        "failed,pending also those it never fetched: a cancel or a restart stopped it) as a "
        "new job of the same caller, class, metadata, options and custom ids, whose parent is "
        "JOB, and fetch it as run does. `trio-batch export JOB --merged` then writes one "
        "complete file.",
    )
    _add_job_argument(retry)
    retry.add_argument(
        "--only",
        default="failed",
        metavar="KINDS",
        help="failed, pending, or failed,pending (default: failed)",
    )
    _add_fetch_options(retry)
    # The retry is the parent's caller's and class's, and as big as the parent's failures.
    retry.set_defaults(caller=None, caller_class=None, max_targets=DEFAULT_MAX_TARGETS)

    status = sub.add_parser("status", parents=[db], help="show a job and its targets' statuses")
    _add_job_argument(status)

    results = sub.add_parser("results", parents=[db], help="print a job's stored results")
    _add_job_argument(results)
    results.add_argument("--json", action="store_true", help="print JSON")

    jobs = sub.add_parser("jobs", parents=[db], help="list the jobs whose lease has not lapsed")
    jobs.add_argument("--caller", type=caller_name(), default=None, help="only this caller's jobs")
    jobs.add_argument(
        "--limit",
        type=whole_number(1, MAX_INDEX),
        default=100,
        help="at most this many (default 100)",
    )
    jobs.add_argument("--json", action="store_true", help="print JSON")
    add_job_filters(jobs)
    export = add_export_parser(sub, db)
    _add_job_argument(export)
    export.add_argument(
        "--warc",
        action="store_true",
        help="write the job's snapshot as a WARC/1.1 file (.warc.gz) instead of its results "
        "(the warc extra)",
    )
    add_snapshot_dir(export)
    add_import_parser(sub, db)

    forget = sub.add_parser(
        "forget",
        parents=[db],
        help="delete a finished job and its results, so its targets can be run again",
        description="Delete a finished (done, partial, failed or cancelled) job and its "
        "results now, instead of when its lease lapses, so that `trio-batch run` of the same "
        "targets by the same caller fetches them again. A live job is refused: wait for it.",
    )
    _add_job_argument(forget)

    gc = sub.add_parser(
        "gc",
        parents=[db],
        help="delete the jobs whose lease has lapsed, and their snapshots unless pinned",
    )
    add_snapshot_dir(gc)
    pin = sub.add_parser(
        "pin",
        parents=[db],
        help="keep a job's snapshot past its lease, until unpinned",
        description="Keep the snapshot of JOB (a job run with --snapshot) when its lease lapses "
        "and `trio-batch gc` runs, so it can be replayed later. With --shared, any caller may "
        "replay it; without, only the job's own caller.",
    )
    _add_job_argument(pin)
    pin.add_argument("--shared", action="store_true", help="let any caller replay it")
    add_snapshot_dir(pin)
    unpin = sub.add_parser(
        "unpin", parents=[db], help="let a pinned job's snapshot go with the job's lease"
    )
    _add_job_argument(unpin)
    add_snapshot_dir(unpin)

    # The service's options live in trio_batch.http (the http extra); they are parsed there.
    serve = sub.add_parser(
        "serve",
        add_help=False,
        help="serve the HTTP API (needs the http extra; `trio-batch serve --help`)",
    )
    serve.add_argument("serve_args", nargs=argparse.REMAINDER)  # main() hands them over
    return parser


def _positive_count(text: str) -> int:
    count = parse_count(text, max_digits=9)
    if count is None or count < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not {text!r}")
    return count


#: The commands that take a job id.
_JOB_COMMANDS = ("status", "results", "forget", "export", "retry", "pin", "unpin")


def _add_submitter_options(run: argparse.ArgumentParser) -> None:
    """Who submits a batch file and how big it may be (``run``; a retry takes its parent's)."""
    run.add_argument(
        "--caller",
        type=caller_name(),
        default=None,
        help="who submits (default: your login name); part of the idempotency key",
    )
    run.add_argument(
        "--class",
        dest="caller_class",
        type=caller_name("caller class"),
        default="cli",
        help="the caller's class (default: cli)",
    )
    run.add_argument(
        "--max-targets",
        type=_positive_count,
        default=DEFAULT_MAX_TARGETS,
        metavar="N",
        help="refuse a file of more than N targets, which one job would take too long to "
        "fetch and show; split it instead (default: %(default)s)",
    )


def _add_fetch_options(run: argparse.ArgumentParser) -> None:
    """The options of a command that submits a job and fetches it (``run``, ``retry``)."""
    run.add_argument(
        "--json", action="store_true", help="print the job and its targets as JSON on stdout"
    )
    run.add_argument("-q", "--quiet", action="store_true", help="show no progress")
    add_otel_argument(run)
    add_log_format_argument(run)
    run.add_argument(
        "--ttl",
        type=positive_number("seconds"),
        default=Config().ttl,
        metavar="SECONDS",
        help="how long the job and its results are kept after its last activity "
        "(default: %(default)g)",
    )
    add_fetch_limits(run)
    add_store_options(run)
    add_politeness(run)
    add_snapshot_dir(run)


def _add_job_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "job", metavar="JOB", nargs="?", help="the job id (any id also works as --job=ID)"
    )
    parser.add_argument("--job", dest="job_option", metavar="ID", help=argparse.SUPPRESS)


def _job_ids_as_options(argv: list[str]) -> list[str]:
    """Rewrite a job id that starts with ``-`` (``status -hY...``) as ``--job=-hY...``.

    argparse reads any word starting with ``-`` as an option, so ids of older databases (ids
    are no longer drawn that way) could not be passed as the positional JOB. Only words of a
    job id's exact shape are rewritten, never the value of ``--db`` nor anything after ``--``.
    """
    if not argv or argv[0] not in _JOB_COMMANDS:
        return argv
    out = argv[:1]
    for i, word in enumerate(argv[1:], start=1):
        if word == "--":
            out.extend(argv[i:])
            break
        if word.startswith("-") and is_job_id(word) and argv[i - 1] != "--db":
            if out[-1] == "--job":
                out.pop()  # --job -hY...: argparse would refuse a value that looks like an option
            out.append(f"--job={word}")
        else:
            out.append(word)
    return out


def _job_id(args: argparse.Namespace) -> str:
    """The job id given as JOB or --job; exactly one is required."""
    if (args.job is None) == (args.job_option is None):
        raise UsageError(f"{args.command} takes one job id: JOB, or --job ID")
    return str(args.job if args.job is not None else args.job_option)


# --------------------------------------------------------------------------------------------
# Entry point


def _serve(argv: list[str]) -> int:
    # Its options need the http extra (Starlette, Hypercorn), so it parses them itself.
    try:
        from ._serve import serve_main
    except ImportError as exc:
        report_error(
            f"{exc.name} is not installed; the HTTP service needs the http extra: "
            "pip install 'trio-batch[http]'"
        )
        return EXIT_USAGE
    return serve_main(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        return _serve(argv[1:])
    parser = _parser()
    args = parser.parse_args(_job_ids_as_options(argv))
    if args.command in _JOB_COMMANDS:
        try:
            args.job = _job_id(args)
        except UsageError as exc:
            report_error(str(exc))
            return EXIT_USAGE
    try:
        import rich  # noqa: F401

        if args.command == "run":
            import trio_batch.fetchers  # noqa: F401 - httpx and friends
    except ImportError as exc:
        report_error(
            f"{exc.name} is not installed; the command line needs the cli extra: "
            "pip install 'trio-batch[cli]'"
        )
        return EXIT_USAGE
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "retry":
            return cmd_retry(args)
        if args.command == "import-warc":
            return cmd_import_warc(args)
        with open_db(args.db, create=False) as store:
            if store is None:
                return _no_database(args)
            if args.command == "status":
                return cmd_status(store, args)
            if args.command == "results":
                return cmd_results(store, args)
            if args.command == "jobs":
                return cmd_jobs(store, args)
            if args.command == "forget":
                return cmd_forget(store, args)
            if args.command == "export":
                return cmd_export_warc(store, args) if args.warc else cmd_export(store, args)
            if args.command in ("pin", "unpin"):
                return cmd_pin(store, args, pinned=args.command == "pin")
            return cmd_gc(store, args)
    except UsageError as exc:
        report_error(str(exc))
        return EXIT_USAGE
    except BatchError as exc:
        # A database that refused a call (locked past the busy timeout, full, failing): one
        # line, as every other error, never a traceback.
        report_error(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        report_error("interrupted")
        return EXIT_CANCELLED
    except BrokenPipeError:
        # `trio-batch results JOB | head`: the reader went away; that is not an error.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return EXIT_DONE


def _no_database(args: argparse.Namespace) -> int:
    db = args.db or default_db()
    if args.command in _JOB_COMMANDS:
        report_error(f"no job {args.job}: there is no database at {db}")
        return EXIT_FAILED
    if args.command == "jobs":
        if args.json:
            print("[]")
        else:
            stderr_console().print(f"no jobs (there is no database at {db})", markup=False)
        return EXIT_DONE
    print("purged 0 expired job(s)")
    return EXIT_DONE
