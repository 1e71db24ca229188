"""``trio-batch run``: submit a batch file, show its progress, print its results."""

from __future__ import annotations

import argparse
import contextlib
import functools
import getpass
import logging
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from .._config import Config
from .._errors import BatchError, InvalidRequest, InvalidTargets, JobGone, StoreLocked
from .._files import read_bounded
from .._model import Job, JobState, Target, TargetStatus, check_caller
from .._retry import RetryNotice
from .._text import printable
from .._tracing import Tracing
from ..store import JobStore
from ._common import (
    EXIT_BUSY,
    EXIT_CANCELLED,
    EXIT_DONE,
    EXIT_FAILED,
    PrintableFormatter,
    UsageError,
    ask,
    open_db,
    print_json,
    report_error,
    stderr_console,
    stdout_console,
    targets_json,
)
from ._input import InputError, parse_targets
from ._logs import JsonFormatter
from ._options import politeness, retry_policy
from ._snapshots import recording, snapshot_store
from ._telemetry import setup_tracing

if TYPE_CHECKING:
    from rich.console import Console

    from ._console import TargetRow


__all__ = ["cmd_retry", "cmd_run", "default_caller", "fetch_job"]


def default_caller() -> str:
    """The caller a local command runs as: the login name, or ``cli`` without one.

    Raises :class:`UsageError` for a login name no job can have (a control character, bytes
    that are not UTF-8, from ``LOGNAME`` say), before any database is opened: say --caller.
    """
    try:
        name = getpass.getuser() or "cli"
    except (OSError, KeyError):  # no login name in some containers
        return "cli"
    try:
        return check_caller(name)
    except InvalidRequest as exc:
        raise UsageError(
            f"your login name cannot be a caller ({exc}); name one with --caller NAME"
        ) from None


#: Largest batch file ``run`` reads (bytes): far past any batch of --max-targets targets.
MAX_BATCH_BYTES = 32 * 1024 * 1024
#: Most targets one ``run`` submits as one job unless --max-targets says otherwise.
DEFAULT_MAX_TARGETS = 10_000


def _read_input(name: str) -> str:
    """The batch file ``name`` (``-``: standard input), at most MAX_BATCH_BYTES of it.

    Anything but a regular file is refused before it is read (``/dev/zero`` or a FIFO would
    be read for ever); standard input is read up to the cap and refused past it.
    """
    try:
        if name == "-":
            data = sys.stdin.buffer.read(MAX_BATCH_BYTES + 1)
            if len(data) > MAX_BATCH_BYTES:
                raise ValueError(f"standard input holds more than {MAX_BATCH_BYTES // 2**20} MiB")
        else:
            data = read_bounded(name, MAX_BATCH_BYTES)
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(
            f"{exc}; pass a batch file of at most {MAX_BATCH_BYTES // 2**20} MiB (split a "
            "bigger one), or - to read standard input"
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Where, as a person finds it: the line, and the column in bytes (a byte offset
        # into a file of thousands of lines says little).
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        label = "<stdin>" if name == "-" else name
        raise UsageError(
            f"{label}:{line}: not UTF-8 text: the byte 0x{data[exc.start]:02x} at column "
            f"{column} ({exc.reason}); save the file as UTF-8"
        ) from None


def cmd_run(args: argparse.Namespace) -> int:
    text = _read_input(args.file)
    label = "<stdin>" if args.file == "-" else args.file
    try:
        targets, lines = parse_targets(text)
    except InputError as exc:
        where = f"{label}:{exc.line}" if exc.line is not None else label
        raise UsageError(f"{where}: {exc}") from None
    if len(targets) > args.max_targets:
        raise UsageError(
            f"{label} holds {len(targets)} targets; one run fetches at most {args.max_targets} "
            f"as one job: split the file into parts of up to {args.max_targets} targets and run "
            "each (`split -l` for a file of one target per line), or raise --max-targets"
        )
    _check_options(targets, lines, label)
    try:
        targets = recording(args).apply(targets)
    except InvalidRequest as exc:
        raise UsageError(str(exc)) from None
    caller = args.caller if args.caller is not None else default_caller()
    return fetch_job(args, targets, caller)


def cmd_retry(args: argparse.Namespace) -> int:
    """``trio-batch retry JOB``: fetch the ended job's failed (``--only``: and unfetched)
    targets as a new job of the same caller, class, metadata and custom ids. The job is read
    once the runner holds the database, so a job a killed run left live is reaped first
    (failed, ``restart``) and its unfetched targets can be retried."""
    from ..runner._batch_ops import check_only

    try:
        kinds = check_only([k.strip() for k in args.only.split(",")])
    except InvalidRequest as exc:
        raise UsageError(f"--only: {exc}") from None
    return fetch_job(args, [], args.caller or default_caller(), retry=(args.job, kinds))


def fetch_job(
    args: argparse.Namespace,
    targets: list[Target],
    caller: str,
    *,
    retry: tuple[str, frozenset[str]] | None = None,
) -> int:
    """Submit ``targets`` as ``caller``'s job and fetch it, showing progress; or, with
    ``retry`` (a job id and what to retry), the retry of that job (``run``'s and ``retry``'s
    common part). Returns the exit code."""
    try:
        tracing, flush_traces = setup_tracing(args.otel)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _configure_logging(as_json=args.log_format == "json")
    with open_db(
        args.db, create=True, store_timeout=args.store_timeout, listen_url=args.listen_db
    ) as store:
        assert store is not None  # created if missing
        config = Config(
            ttl=args.ttl,
            targets_per_job=max(Config().targets_per_job, len(targets), args.max_targets),
            target_timeout=args.target_timeout,
            retry=retry_policy(args.retries),
        )
        try:
            submit = functools.partial(_run_job, retry=retry)
            outcome = trio.run(submit, store, config, caller, args, targets, tracing)
        except StoreLocked:
            # The runner allows one runner per database: a second one would reap the first
            # one's live jobs as "restart".
            report_error(
                f"another trio-batch run (or runner) is using {store.location}; wait for it to "
                "finish, or use another --db"
            )
            return EXIT_BUSY
        except InvalidRequest as exc:
            hint = getattr(exc, "hint", None)  # what to do about a refused target or replay
            raise UsageError(f"{exc} (hint: {hint})" if hint else str(exc)) from None
        except BatchError as exc:
            report_error(str(exc))
            return EXIT_FAILED
        finally:
            flush_traces()
        final = None
        with contextlib.suppress(JobGone):  # deleted as it was read: as good as gone
            final = ask(store, lambda s: _final(s, outcome.job_id, as_json=args.json))
        store_path = store.location
    if final is None:  # pragma: no cover - the lease is at least --ttl seconds
        report_error(f"job {outcome.job_id} is gone (its lease lapsed)")
        return EXIT_FAILED
    job, statuses, rows = final
    _report(job, statuses, rows, outcome, store_path=store_path, as_json=args.json)
    return _exit_code(job, outcome)


async def _final(
    store: JobStore, job_id: str, *, as_json: bool
) -> tuple[Job, list[TargetStatus], list[TargetRow]] | None:
    """The ended job for its report: with ``as_json`` every target with its result (the
    JSON is the results), else the table's rows, read a page at a time; None if it is gone."""
    from . import _console

    if as_json:
        found = await store.get_status(job_id, now=time.time())
        return None if found is None else (found[0], found[1], [])
    job = await store.get_job(job_id, now=time.time())
    return None if job is None else (job, [], await _console.read_rows(store, job))


def _check_options(targets: list[Target], lines: list[int], label: str) -> None:
    """Refuse a target the fetcher would refuse (a bad regex, jq program, page range or mode)
    as ``FILE:LINE`` before the database is opened: the runner's own check comes too late
    not to create a missing database file."""
    from ..fetchers._options import check_target  # what every HttpFetcher checks
    from ..runner import check_each

    try:
        check_each(check_target, tuple(targets))
    except InvalidTargets as exc:
        where = label if exc.index is None else f"{label}:{lines[exc.index]}"
        hint = f" (hint: {exc.hint})" if exc.hint else ""
        raise UsageError(f"{where}: {exc}{hint}") from None


class _StderrNow(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record: the live progress bar
    swaps in a proxy that prints above the bar, so log lines do not break it."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _configure_logging(*, as_json: bool = False) -> None:
    """Warnings of trio_batch as ``trio-batch: ...``; other libraries' under their own name.

    A library's warning (say pypdf's about a damaged file) printed as ``trio-batch: ...``
    read as if the command itself had something to say. ``as_json``: every line a JSON object
    (:class:`~trio_batch.cli._logs.JsonFormatter`), which names its logger.
    """
    own = logging.getLogger("trio_batch")
    if any(isinstance(h, _StderrNow) for h in own.handlers):
        return
    mine = _StderrNow()
    mine.setFormatter(JsonFormatter() if as_json else PrintableFormatter("trio-batch: %(message)s"))
    own.addHandler(mine)
    own.setLevel(logging.WARNING)
    own.propagate = False
    others = _StderrNow()
    others.setFormatter(
        JsonFormatter() if as_json else PrintableFormatter("%(name)s: %(levelname)s: %(message)s")
    )
    root = logging.getLogger()
    root.addHandler(others)
    root.setLevel(logging.WARNING)


@dataclass
class _Outcome:
    job_id: str
    reused: bool
    interrupted: bool  # Ctrl-C was pressed (or SIGTERM received)


async def _run_job(
    store: JobStore,
    config: Config,
    caller: str,
    args: argparse.Namespace,
    targets: list[Target],
    tracing: Tracing,
    *,
    retry: tuple[str, frozenset[str]] | None = None,
) -> _Outcome:
    from ..fetchers import HttpFetcher
    from ..fetchers._recording import check_replays
    from ..runner import open_runner
    from . import _console

    # Installed before the job exists, so no Ctrl-C can slip by as a KeyboardInterrupt.
    outcome: _Outcome | None = None
    err = stderr_console()
    view: _console.ProgressView | None = None

    def on_retry(notice: RetryNotice) -> None:
        if not args.quiet:
            _note(view, err, _console.retry_line(notice))

    snapshots = snapshot_store(args)
    if retry is None:  # a replay the caller may not make: refused before anything runs
        await check_replays(snapshots, store, caller, targets, now=time.time())
    # SIGTERM as Ctrl-C: a process manager's stop cancels the job rather than killing the
    # process with its job left running (until the next run reaped it as "restart").
    stopping = trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
    with stopping as signals, trio.CancelScope() as hard_stop:
        fetcher = HttpFetcher(**politeness(args), snapshots=snapshots)
        async with open_runner(
            store, fetcher, config, on_retry=on_retry, tracing=tracing
        ) as runner:
            if retry is None:
                job_id, reused = await runner.submit(caller, args.caller_class, targets)
            else:
                found = await runner.retry(retry[0], only=retry[1])
                if found is None:
                    raise BatchError(f"no job {retry[0]} (unknown id, or its lease has lapsed)")
                job_id, reused = found
                # Statuses only: a reused retry's results may be big, and only URLs are used.
                overview = await runner.overview(job_id)
                assert overview is not None  # just created, with a lease of at least --ttl
                targets = [Target(t.url, t.options, t.custom_id) for t in overview[1]]
            outcome = _Outcome(job_id, reused, interrupted=False)
            if reused:
                return outcome
            if not args.quiet:
                cls = _console.RichProgress if err.is_terminal else _console.PlainProgress
                view = cls(err, targets, job_id)

            async def on_signal(outcome: _Outcome) -> None:
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
                        _note(view, err, "stopping now")
                        hard_stop.cancel()

            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(on_signal, outcome)
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


def _exit_code(job: Job, outcome: _Outcome) -> int:
    if job.status == JobState.DONE:
        return EXIT_DONE
    if job.status == JobState.CANCELLED and outcome.interrupted:
        return EXIT_CANCELLED  # this run was interrupted; an earlier run's Ctrl-C is not this one's
    return EXIT_FAILED


def _reused_message(job: Job, store_path: str) -> str:
    """What a rerun of a stored job says: how it ended, and how to fetch its targets again."""
    from . import _console

    ended = "" if not job.is_terminal else f" It ended {job.status}"
    if ended and job.error:
        ended += f" ({job.error})"
    if ended and job.status == JobState.CANCELLED:
        ended += ", its unfetched targets left pending"
    return (
        f"job {job.id} was submitted before with the same targets by the same caller: "
        f"showing its stored results; nothing was fetched now.{ended + '.' if ended else ''} "
        f"It is kept until {_console.format_time(job.expires_at)}; to fetch its targets again "
        f"now, delete it first with `trio-batch forget {job.id} --db {_shell(store_path)}` "
        "(or use another --caller)."
    )


def _report(
    job: Job,
    targets: list[TargetStatus],
    rows: list[TargetRow],
    outcome: _Outcome,
    *,
    store_path: str,
    as_json: bool,
) -> None:
    from . import _console

    err = stderr_console()
    if outcome.reused:
        err.print(_reused_message(job, store_path), markup=False, highlight=False)
    if as_json:
        print_json(
            {"job": job.to_json(), "reused": outcome.reused, "targets": targets_json(targets)}
        )
        return
    out = stdout_console()
    shown = _console.worth_showing(rows, _console.screenful(out))
    out.print(_console.results_table(shown))
    if len(shown) < len(rows):
        out.print(
            f"[dim]{len(rows) - len(shown)} more target(s) not shown (failed ones first); "
            f"every one: trio-batch status {job.id} --db {_quote(store_path)}[/]"
        )
    out.print(_console.summary_line(job, rows))
    out.print(
        f"[dim]full results: trio-batch results {job.id} --db {_quote(store_path)}[/]",
    )


def _shell(path: str) -> str:
    """``path`` as a shell word, safe on a terminal (for text printed without markup)."""
    import shlex

    return shlex.quote(printable(path))


def _quote(path: str) -> str:
    """:func:`_shell`, escaped for rich markup (for text printed with it)."""
    from rich.markup import escape

    return escape(_shell(path))
