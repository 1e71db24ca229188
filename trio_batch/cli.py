"""The ``trio-batch`` command: run a batch file, then inspect jobs and results.

::

    trio-batch run FILE [--db PATH] [--caller NAME] [--class NAME] [--json] [--quiet]
    trio-batch status JOB [--db PATH]
    trio-batch results JOB [--db PATH] [--json]
    trio-batch jobs [--db PATH] [--caller NAME] [--json]
    trio-batch forget JOB [--db PATH]
    trio-batch gc [--db PATH]

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
import getpass
import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import trio

from . import __version__
from ._config import COMMAND_TARGET_TIMEOUT, Config
from ._errors import BatchError, InvalidRequest, JobLive, StoreError, StoreLocked
from ._input import InputError, parse_targets
from ._model import Job, JobState, Target, TargetStatus, is_job_id
from .store import JobStore, open_store

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "EXIT_BUSY",
    "EXIT_CANCELLED",
    "EXIT_DONE",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "default_db",
    "main",
]

T = TypeVar("T")

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: Another run holds the database: nothing was submitted, unlike 1 (a job that ran and failed).
EXIT_BUSY = 3
EXIT_CANCELLED = 130

#: Lapsed jobs deleted per transaction by `trio-batch gc`.
GC_BATCH = 100

#: Environment variable that overrides the default database path.
DB_ENV = "TRIO_BATCH_DB"

_EPILOG = """\
exit codes: 0 done, 1 partial or failed (or no such job), 2 usage or input error,
3 another run holds the database (nothing submitted), 130 cancelled with Ctrl-C.

database: every command takes --db PATH. Without it, $TRIO_BATCH_DB is used, else
trio-batch.db in your user data directory (on Linux ~/.local/share/trio-batch/). A per-user
file rather than ./trio-batch.db, so that re-running a batch, `status` and `results` find your
jobs whichever directory you run them from, and no database files are scattered over (or
committed with) your project folders. Pass --db ./trio-batch.db to keep one per project.
"""


def default_db() -> Path:
    """The database used without ``--db``: ``$TRIO_BATCH_DB``, else the user data directory's."""
    env = os.environ.get(DB_ENV)
    if env:
        return Path(env)
    import platformdirs

    return platformdirs.user_data_path("trio-batch", appauthor=False) / "trio-batch.db"


def _default_caller() -> str:
    try:
        return getpass.getuser() or "cli"
    except (OSError, KeyError):  # no login name in some containers
        return "cli"


# --------------------------------------------------------------------------------------------
# Argument parsing


def _parser() -> argparse.ArgumentParser:
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument(
        "--db",
        metavar="PATH",
        type=Path,
        help="SQLite database (default: $TRIO_BATCH_DB, else trio-batch.db in your user data "
        "directory; see `trio-batch --help`)",
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
        "comments). Options: mode (raw|text), grep, context, jq, pages.\n\n" + _EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("file", metavar="FILE", help="the batch file, or - for standard input")
    run.add_argument(
        "--caller",
        default=None,
        help="who submits (default: your login name); part of the idempotency key",
    )
    run.add_argument(
        "--class", dest="caller_class", default="cli", help="the caller's class (default: cli)"
    )
    run.add_argument(
        "--json", action="store_true", help="print the job and its targets as JSON on stdout"
    )
    run.add_argument("-q", "--quiet", action="store_true", help="show no progress")
    run.add_argument(
        "--ttl",
        type=float,
        default=Config().ttl,
        metavar="SECONDS",
        help="how long the job and its results are kept after its last activity "
        "(default: %(default)g)",
    )
    run.add_argument(
        "--target-timeout",
        type=float,
        default=COMMAND_TARGET_TIMEOUT,
        metavar="SECONDS",
        help="a target taking longer fails with error 'timeout' (default: %(default)g)",
    )

    status = sub.add_parser("status", parents=[db], help="show a job and its targets' statuses")
    _add_job_argument(status)

    results = sub.add_parser("results", parents=[db], help="print a job's stored results")
    _add_job_argument(results)
    results.add_argument("--json", action="store_true", help="print JSON")

    jobs = sub.add_parser("jobs", parents=[db], help="list the jobs whose lease has not lapsed")
    jobs.add_argument("--caller", default=None, help="only this caller's jobs")
    jobs.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    jobs.add_argument("--json", action="store_true", help="print JSON")

    forget = sub.add_parser(
        "forget",
        parents=[db],
        help="delete a finished job and its results, so its targets can be run again",
        description="Delete a finished (done, partial, failed or cancelled) job and its "
        "results now, instead of when its lease lapses, so that `trio-batch run` of the same "
        "targets by the same caller fetches them again. A live job is refused: wait for it.",
    )
    _add_job_argument(forget)

    sub.add_parser("gc", parents=[db], help="delete the jobs whose lease has lapsed")

    # The service's options live in trio_batch.http (the http extra); they are parsed there.
    serve = sub.add_parser(
        "serve",
        add_help=False,
        help="serve the HTTP API (needs the http extra; `trio-batch serve --help`)",
    )
    serve.add_argument("serve_args", nargs=argparse.REMAINDER)  # main() hands them over
    return parser


#: The commands that take a job id.
_JOB_COMMANDS = ("status", "results", "forget")


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
        raise _UsageError(f"{args.command} takes one job id: JOB, or --job ID")
    return str(args.job if args.job is not None else args.job_option)


# --------------------------------------------------------------------------------------------
# Entry point


def _serve(argv: list[str]) -> int:
    # Its options are trio_batch.http's own (the http extra), so it parses them itself.
    try:
        from .http import serve_main
    except ImportError as exc:
        _error(
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
        except _UsageError as exc:
            _error(str(exc))
            return EXIT_USAGE
    try:
        import rich  # noqa: F401

        if args.command == "run":
            from . import fetchers  # noqa: F401 - httpx and friends
    except ImportError as exc:
        _error(
            f"{exc.name} is not installed; the command line needs the cli extra: "
            "pip install 'trio-batch[cli]'"
        )
        return EXIT_USAGE
    try:
        if args.command == "run":
            return _cmd_run(args)
        with _open_store(args.db, create=False) as store:
            if store is None:
                return _no_database(args)
            if args.command == "status":
                return _cmd_status(store, args)
            if args.command == "results":
                return _cmd_results(store, args)
            if args.command == "jobs":
                return _cmd_jobs(store, args)
            if args.command == "forget":
                return _cmd_forget(store, args)
            return _cmd_gc(store)
    except _UsageError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_CANCELLED
    except BrokenPipeError:
        # `trio-batch results JOB | head`: the reader went away; that is not an error.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return EXIT_DONE


class _UsageError(Exception):
    """Bad input: reported as ``trio-batch: message`` with exit code 2."""


def _error(message: str) -> None:
    print(f"trio-batch: {message}", file=sys.stderr)


#: Width of tables written to a pipe or file (a terminal's own width is used otherwise).
PIPE_WIDTH = 120


def _console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False, soft_wrap=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


def _stdout() -> Console:
    return _console()


def _stderr() -> Console:
    return _console(stderr=True)


@contextlib.contextmanager
def _open_store(path: Path | None, *, create: bool) -> Iterator[JobStore | None]:
    """Open the store at ``path`` (or the default); None if it does not exist and not create."""
    explicit = path is not None
    db = default_db() if path is None else path
    if str(db) != ":memory:" and not db.exists():
        if not create:
            yield None
            return
        if not explicit:
            db.parent.mkdir(parents=True, exist_ok=True)
    try:
        store = open_store(db)
    except StoreError as exc:
        raise _UsageError(f"{exc} (--db {db})") from None
    try:
        yield store
    finally:
        trio.run(store.aclose)


def _ask(store: JobStore, call: Callable[[JobStore], Awaitable[T]]) -> T:
    """Run one store call from the synchronous command line."""

    async def ask() -> T:
        return await call(store)

    return trio.run(ask)


def _no_database(args: argparse.Namespace) -> int:
    db = args.db or default_db()
    if args.command in _JOB_COMMANDS:
        _error(f"no job {args.job}: there is no database at {db}")
        return EXIT_FAILED
    if args.command == "jobs":
        if args.json:
            print("[]")
        else:
            _stderr().print(f"no jobs (there is no database at {db})", markup=False)
        return EXIT_DONE
    print("purged 0 expired job(s)")
    return EXIT_DONE


# --------------------------------------------------------------------------------------------
# run


def _read_input(name: str) -> str:
    try:
        if name == "-":
            return sys.stdin.read()
        return Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise _UsageError(f"cannot read {name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise _UsageError(f"{name} is not UTF-8 text: {exc}") from None


def _cmd_run(args: argparse.Namespace) -> int:
    text = _read_input(args.file)
    label = "<stdin>" if args.file == "-" else args.file
    try:
        targets, _lines = parse_targets(text)
    except InputError as exc:
        where = f"{label}:{exc.line}" if exc.line is not None else label
        raise _UsageError(f"{where}: {exc}") from None
    for flag, value in (("--ttl", args.ttl), ("--target-timeout", args.target_timeout)):
        if not (value > 0 and math.isfinite(value)):
            raise _UsageError(f"{flag} must be a positive number of seconds")
    caller = args.caller if args.caller is not None else _default_caller()
    _configure_logging()
    with _open_store(args.db, create=True) as store:
        assert store is not None  # created if missing
        config = Config(
            ttl=args.ttl,
            targets_per_job=max(Config().targets_per_job, len(targets)),
            target_timeout=args.target_timeout,
        )
        try:
            outcome = trio.run(_run_job, store, config, caller, args, targets)
        except StoreLocked:
            # The runner allows one runner per database: a second one would reap the first
            # one's live jobs as "restart".
            _error(
                f"another trio-batch run (or runner) is using {store.location}; wait for it to "
                "finish, or use another --db"
            )
            return EXIT_BUSY
        except InvalidRequest as exc:
            raise _UsageError(str(exc)) from None
        except BatchError as exc:
            _error(str(exc))
            return EXIT_FAILED
        final = _ask(store, lambda s: s.get_status(outcome.job_id, now=time.time()))
        store_path = store.location
    if final is None:  # pragma: no cover - the lease is at least --ttl seconds
        _error(f"job {outcome.job_id} is gone (its lease lapsed)")
        return EXIT_FAILED
    job, statuses = final
    _report(job, statuses, outcome, store_path=store_path, as_json=args.json)
    return _exit_code(job)


class _StderrNow(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record: the live progress bar
    swaps in a proxy that prints above the bar, so log lines do not break it."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _configure_logging() -> None:
    """Warnings of trio_batch as ``trio-batch: ...``; other libraries' under their own name.

    A library's warning (say pypdf's about a damaged file) printed as ``trio-batch: ...``
    read as if the command itself had something to say.
    """
    own = logging.getLogger("trio_batch")
    if any(isinstance(h, _StderrNow) for h in own.handlers):
        return
    mine = _StderrNow()
    mine.setFormatter(logging.Formatter("trio-batch: %(message)s"))
    own.addHandler(mine)
    own.setLevel(logging.WARNING)
    own.propagate = False
    others = _StderrNow()
    others.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(others)
    root.setLevel(logging.WARNING)


@dataclass
class _Outcome:
    job_id: str
    reused: bool
    interrupted: bool  # Ctrl-C was pressed
    forced: bool  # a second Ctrl-C stopped the in-flight fetch


async def _run_job(
    store: JobStore, config: Config, caller: str, args: argparse.Namespace, targets: list[Target]
) -> _Outcome:
    from . import _console
    from ._open_runner import open_runner
    from .fetchers import http_fetch

    # Installed before the job exists, so no Ctrl-C can slip by as a KeyboardInterrupt.
    outcome: _Outcome | None = None
    with trio.open_signal_receiver(signal.SIGINT) as signals, trio.CancelScope() as hard_stop:
        async with open_runner(store, http_fetch, config) as runner:
            job_id, reused = await runner.submit(caller, args.caller_class, targets)
            outcome = _Outcome(job_id, reused, interrupted=False, forced=False)
            if reused:
                return outcome
            err = _stderr()
            view: _console.ProgressView | None = None
            if not args.quiet:
                cls = _console.RichProgress if err.is_terminal else _console.PlainProgress
                view = cls(err, targets, job_id)

            async def on_sigint(outcome: _Outcome) -> None:
                async for _ in signals:
                    if not outcome.interrupted:
                        outcome.interrupted = True
                        _note(
                            view,
                            err,
                            "cancelling: the target being fetched will finish and be stored "
                            "(Ctrl-C again to stop at once)",
                        )
                        await runner.cancel(job_id)
                    else:
                        outcome.forced = True
                        _note(view, err, "stopping now")
                        hard_stop.cancel()

            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(on_sigint, outcome)
                    async for item in runner.watch(job_id):
                        if isinstance(item, Job):
                            break
                        if view is not None:
                            view.outcome(item)
                    nursery.cancel_scope.cancel()
            finally:
                if view is not None:
                    view.close()
    assert outcome is not None  # only a second Ctrl-C, after submit, gets here early
    return outcome


def _note(view: Any, console: Console, message: str) -> None:
    """Show ``message`` above the progress, or on stderr without one."""
    if view is not None:
        view.note(message)
    else:
        console.print(message, markup=False, highlight=False)


def _exit_code(job: Job) -> int:
    if job.status == JobState.DONE:
        return EXIT_DONE
    if job.status == JobState.CANCELLED:
        return EXIT_CANCELLED
    return EXIT_FAILED


def _report(
    job: Job,
    targets: list[TargetStatus],
    outcome: _Outcome,
    *,
    store_path: str,
    as_json: bool,
) -> None:
    from . import _console

    err = _stderr()
    if outcome.reused:
        err.print(
            f"job {job.id} was submitted before with the same targets by the same caller: "
            f"showing its stored results; nothing was fetched. It is kept until "
            f"{_console.format_time(job.expires_at)}; to fetch again before then, use "
            "another --caller.",
            markup=False,
            highlight=False,
        )
    if as_json:
        _print_json({"job": job.to_json(), "reused": outcome.reused, "targets": _targets(targets)})
        return
    out = _stdout()
    out.print(_console.results_table(targets))
    out.print(_console.summary_line(job, targets))
    out.print(
        f"[dim]full results: trio-batch results {job.id} --db {_quote(store_path)}[/]",
    )


def _quote(path: str) -> str:
    import shlex

    from rich.markup import escape

    return escape(shlex.quote(path))


def _targets(targets: list[TargetStatus]) -> list[dict[str, Any]]:
    return [t.to_json() for t in targets]


def _print_json(obj: object, file: IO[str] | None = None) -> None:
    json.dump(obj, file or sys.stdout, ensure_ascii=False, indent=2)
    (file or sys.stdout).write("\n")


# --------------------------------------------------------------------------------------------
# status, results, jobs, gc


def _get(store: JobStore, job_id: str) -> tuple[Job, list[TargetStatus]] | None:
    found = _ask(store, lambda s: s.get_status(job_id, now=time.time()))
    if found is None:
        _error(f"no job {job_id} in {store.location} (unknown id, or its lease has lapsed)")
    return found


def _cmd_status(store: JobStore, args: argparse.Namespace) -> int:
    from . import _console

    found = _get(store, args.job)
    if found is None:
        return EXIT_FAILED
    job, targets = found
    out = _stdout()
    out.print(_console.job_details(job))
    out.print()
    out.print(_console.results_table(targets))
    return EXIT_DONE


def _cmd_results(store: JobStore, args: argparse.Namespace) -> int:
    from . import _console

    found = _get(store, args.job)
    if found is None:
        return EXIT_FAILED
    job, targets = found
    if args.json:
        _print_json({"job": job.to_json(), "targets": _targets(targets)})
    else:
        _console.print_results(_stdout(), targets)
    return EXIT_DONE


def _cmd_jobs(store: JobStore, args: argparse.Namespace) -> int:
    from . import _console

    if args.limit < 1:
        raise _UsageError("--limit must be at least 1")
    jobs = _ask(store, lambda s: s.list_jobs(caller=args.caller, limit=args.limit, now=time.time()))
    if args.json:
        _print_json([job.to_json() for job in jobs])
    elif not jobs:
        _stderr().print("no jobs", markup=False)
    else:
        _stdout().print(_console.jobs_table(jobs))
    return EXIT_DONE


def _cmd_forget(store: JobStore, args: argparse.Namespace) -> int:
    try:
        job = _ask(store, lambda s: s.forget_job(args.job, now=time.time()))
    except JobLive as exc:
        _error(f"{exc} (trio-batch run is still working on it)")
        return EXIT_FAILED
    if job is None:
        _error(f"no job {args.job} in {store.location} (unknown id, or its lease has lapsed)")
        return EXIT_FAILED
    print(f"forgot job {job.id} ({job.status}, {job.targets_total} target(s))")
    return EXIT_DONE


def _cmd_gc(store: JobStore) -> int:
    async def purge() -> int:
        purged = 0
        while True:
            batch = await store.purge_expired(now=time.time(), batch_size=GC_BATCH)
            purged += batch
            if batch < GC_BATCH:
                return purged

    purged = trio.run(purge)
    print(f"purged {purged} expired job(s)")
    return EXIT_DONE
