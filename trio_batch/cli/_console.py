"""What ``trio-batch`` shows: live progress, result tables, job listings. Rendering only.

Progress goes to stderr, tables and JSON to stdout, so ``trio-batch run f --json > out.json``
still shows progress. On a terminal the progress is a rich live bar; otherwise one plain line
per stored outcome, which reads well in CI logs and pipes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from .._model import Job, Target, TargetState, TargetStatus
from .._retry import RetryNotice
from .._text import printable
from ..runner import export_targets
from ..store import JobStore

__all__ = [
    "PlainProgress",
    "ProgressView",
    "RichProgress",
    "TargetRow",
    "format_time",
    "job_details",
    "jobs_table",
    "print_results",
    "read_rows",
    "results_table",
    "screenful",
    "summary_line",
    "target_row",
    "worth_showing",
]


class ProgressView(Protocol):
    """Live progress of one job being drained."""

    def outcome(self, target: TargetStatus) -> None:
        """A target's outcome was stored."""

    def note(self, message: str) -> None:
        """Show a message (e.g. that the job is being cancelled)."""

    def close(self) -> None:
        """The drain is over: leave the final state on screen."""


class _Counts:
    def __init__(self, targets: Sequence[Target]) -> None:
        self.targets = targets
        self.done = 0
        self.failed = 0
        self.started = time.monotonic()

    def add(self, target: TargetStatus) -> None:
        self.done += 1
        self.failed += target.status == TargetState.FAILED

    @property
    def rate(self) -> str:
        elapsed = time.monotonic() - self.started
        return f"{self.done / elapsed:.1f}/s" if elapsed > 0 and self.done else "-/s"

    def current(self, last_idx: int) -> str:
        nxt = last_idx + 1
        return printable(self.targets[nxt].url) if nxt < len(self.targets) else ""


class PlainProgress:
    """One line per stored outcome: ``[3/12, 1 failed] done  URL  200 text/html 5120 B  2.1/s``."""

    def __init__(self, console: Console, targets: Sequence[Target], job_id: str) -> None:
        self._console = console
        self._counts = _Counts(targets)
        self._print(f"job {job_id}: fetching {len(targets)} target(s)")

    def _print(self, text: str) -> None:
        self._console.print(text, markup=False, highlight=False, soft_wrap=True)

    def outcome(self, target: TargetStatus) -> None:
        """Print the outcome's line."""
        c = self._counts
        c.add(target)
        failed = f", {c.failed} failed" if c.failed else ""
        self._print(
            f"[{c.done}/{len(c.targets)}{failed}] {target.status:6} {printable(target.url)}  "
            f"{_brief(target)}  {c.rate}"
        )

    def note(self, message: str) -> None:
        """Print ``message`` on its own line."""
        self._print(message)

    def close(self) -> None:
        """Nothing to clean up."""


class _RateColumn(ProgressColumn):
    """Targets per second since the start, kept current while a slow target is in flight."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed
        if not task.completed or not elapsed:
            return Text("-/s")
        return Text(f"{task.completed / elapsed:.1f}/s")


class RichProgress:
    """A live bar: done/total, failures, rate, elapsed time and the URL being fetched."""

    def __init__(self, console: Console, targets: Sequence[Target], job_id: str) -> None:
        self._counts = _Counts(targets)
        self._progress = Progress(
            SpinnerColumn(),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("[red]{task.fields[failed]}"),
            _RateColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[current]}", markup=False),
            console=console,
        )
        self._progress.console.print(f"job [bold]{job_id}[/]: fetching {len(targets)} target(s)")
        self._task = self._progress.add_task(
            "fetch", total=len(targets), failed="", current=printable(targets[0].url)
        )
        self._progress.start()

    def outcome(self, target: TargetStatus) -> None:
        """Advance the bar and show the next URL."""
        c = self._counts
        c.add(target)
        self._progress.update(
            self._task,
            completed=c.done,
            failed=f"{c.failed} failed" if c.failed else "",
            current=c.current(target.idx),
        )

    def note(self, message: str) -> None:
        """Print ``message`` above the bar."""
        self._progress.console.print(message, markup=False, highlight=False)

    def close(self) -> None:
        """Stop the live display, leaving the last frame."""
        self._progress.update(self._task, current="")
        self._progress.stop()


def format_time(epoch: float | None) -> str:
    """Local time, to the second, for tables: ``2026-11-29 23:17:42``."""
    if epoch is None:
        return "-"
    try:
        return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a time past any date (a database's own)
        return f"{epoch:g}"


def _first_line(text: str, width: int = 60) -> str:
    """The first non-blank line of ``text``, cut to ``width``, printable on a terminal."""
    for line in text.splitlines():
        line = line.strip()
        if line:
            line = printable(line if len(line) <= width else line[: width - 1] + "…")
            return line
    return ""


def _brief(target: TargetStatus) -> str:
    """One line about a target's outcome: metadata for a result, the error for a failure;
    printable on a terminal (see :func:`~trio_batch._text.printable`)."""
    return printable(_brief_text(target))


def _brief_text(target: TargetStatus) -> str:
    if target.status == TargetState.FAILED:
        return target.error or "failed"
    if target.result is None:
        return "not fetched" if target.status == TargetState.PENDING else "fetching"
    meta = target.result.meta
    parts = [
        str(meta[key])
        for key in ("status_code", "content_type")
        if isinstance(meta.get(key), int | str)
    ]
    if isinstance(meta.get("bytes"), int):
        parts.append(f"{meta['bytes']} B")
    if isinstance(meta.get("matches"), int):
        parts.append(f"{meta['matches']} match(es)")
    return " ".join(parts) if parts else f"{len(target.result.content)} chars"


def _options(target: TargetStatus) -> str:
    """The target's options in brief: ``mode=text grep='x' context``."""
    parts = []
    for key, value in target.options.to_json().items():
        if value is True:
            parts.append(key)
        elif key == "mode":
            parts.append(f"mode={value}")
        else:
            parts.append(f"{key}={value!r}")
    return " ".join(parts)


_STYLES = {
    "done": "green",
    "failed": "red",
    "partial": "yellow",
    "cancelled": "yellow",
    "pending": "dim",
    "running": "cyan",
    "queued": "dim",
}


def _status(value: str) -> str:
    return f"[{_STYLES.get(value, '')}]{value}[/]" if _STYLES.get(value) else value


@dataclass(frozen=True, slots=True)
class TargetRow:
    """What a results table shows of one target, printable: its result cut to a line, so a
    table of many big results holds none of them."""

    idx: int
    status: TargetState
    url: str
    options: str
    attempts: int
    brief: str  # the result's metadata, or the error
    note: str  # a failure's hint, or the result's first line; "" for neither


def target_row(target: TargetStatus) -> TargetRow:
    """``target`` as a row of :func:`results_table`."""
    note = ""
    if target.status == TargetState.FAILED and target.hint:
        note = f"hint: {printable(target.hint)}"
    elif target.result is not None:
        note = _first_line(target.result.content)
    return TargetRow(
        target.idx,
        target.status,
        printable(target.url),
        printable(_options(target)),
        target.attempts,
        _brief(target),
        note,
    )


async def read_rows(store: JobStore, job: Job) -> list[TargetRow]:
    """Every target of ``job`` as a :class:`TargetRow`, read a page at a time as an export
    reads it (pages bounded by their results' size): a job of big results is never held
    whole. Raises :class:`~trio_batch.JobGone` if the job is deleted meanwhile."""
    return [target_row(t) async for _, t in export_targets(store, job, now=time.time())]


def results_table(rows: Sequence[TargetRow]) -> Table:
    """The per-target table printed after a run and by ``status``."""
    table = Table(show_edge=False, pad_edge=False, expand=False)
    table.add_column("#", justify="right")
    table.add_column("status")
    table.add_column("url", overflow="fold")
    table.add_column("outcome", overflow="fold")
    for row in rows:
        outcome = escape(row.brief)
        if row.note:
            outcome += f"\n[dim]{escape(row.note)}[/]"
        url = escape(row.url)
        if row.options:
            url += f"\n[dim]{escape(row.options)}[/]"
        status = _status(str(row.status))
        if row.attempts > 1:  # retried: say how many attempts the outcome took
            status += f"\n[dim]{row.attempts} attempts[/]"
        table.add_row(str(row.idx), status, url, outcome)
    return table


#: Rows of a result table shown when the output is not a terminal (a file, a pipe).
PIPE_ROWS = 50


def screenful(console: Console) -> int:
    """How many rows of a result table fit on ``console``'s screen (a row takes two lines)."""
    if not console.is_terminal:
        return PIPE_ROWS
    return max(5, (console.size.height - 6) // 2)


def worth_showing(targets: Sequence[TargetRow], rows: int) -> list[TargetRow]:
    """At most ``rows`` of ``targets`` in ``idx`` order: the failed ones first, then the rest."""
    if len(targets) <= rows:
        return list(targets)
    failed = [t for t in targets if t.status == TargetState.FAILED][:rows]
    others = [t for t in targets if t.status != TargetState.FAILED][: rows - len(failed)]
    return sorted(failed + others, key=lambda t: t.idx)


def retry_line(notice: RetryNotice) -> str:
    """``retrying target 3 in 2.0 s (attempt 2 of 3): HTTPStatusError: HTTP 503 ...``."""
    return (
        f"retrying target {notice.idx} in {notice.delay:.1f} s (attempt {notice.attempt + 1} of "
        f"{notice.attempts}): {_first_line(notice.error, 100)}"
    )


def summary_line(job: Job, targets: Sequence[TargetRow]) -> str:
    """``job ID: partial - 10 done, 2 failed, 0 not fetched`` (rich markup)."""
    pending = sum(t.status in (TargetState.PENDING, TargetState.RUNNING) for t in targets)
    ok = job.targets_succeeded
    text = (
        f"job [bold]{job.id}[/]: {_status(str(job.status))} - {ok} done, "
        f"{job.targets_failed} failed, {pending} not fetched"
    )
    if job.error:
        text += f" ({escape(printable(job.error))})"
    return text


def job_details(job: Job) -> Table:
    """A two-column table describing one job, for ``status``."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("job", job.id)
    status = _status(str(job.status)) + (f" ({escape(printable(job.error))})" if job.error else "")
    table.add_row("status", status)
    caller, caller_class = printable(job.caller), printable(job.caller_class)
    table.add_row("caller", f"{escape(caller)} (class {escape(caller_class)})")
    table.add_row(
        "targets",
        f"{job.targets_total}: {job.targets_succeeded} done, "
        f"{job.targets_failed} failed, {job.targets_unfinished} not fetched",
    )
    table.add_row("created", format_time(job.created_at))
    table.add_row("updated", format_time(job.updated_at))
    table.add_row("expires", format_time(job.expires_at))
    return table


def jobs_table(jobs: Sequence[Job]) -> Table:
    """The table ``jobs`` prints."""
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("job", no_wrap=True, min_width=22)
    for name in ("status", "caller", "done", "failed", "total", "updated", "expires"):
        table.add_column(name, justify="right" if name in ("done", "failed", "total") else "left")
    for job in jobs:
        table.add_row(
            job.id,
            _status(str(job.status)),
            escape(printable(job.caller)),
            str(job.targets_succeeded),
            str(job.targets_failed),
            str(job.targets_total),
            format_time(job.updated_at),
            format_time(job.expires_at),
        )
    return table


def print_results(console: Console, targets: Sequence[TargetStatus]) -> None:
    """Each target's full content (or error and hint) under a header line, for ``results``."""
    for t in targets:
        header = f"== [{t.idx}] {t.status} {printable(t.url)}  {_brief(t)}"
        console.print(header, markup=False, highlight=False, soft_wrap=True)
        if t.result is not None:
            console.out(printable(t.result.content, multiline=True), highlight=False)
        elif t.status == TargetState.FAILED and t.hint:
            hint = f"hint: {printable(t.hint)}"
            console.print(hint, markup=False, highlight=False, soft_wrap=True)
