"""What the ``trio-batch`` commands share: exit codes, errors, consoles, the database."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import trio

from .._errors import StoreError
from .._model import TargetStatus
from .._text import printable, printable_json
from ..store import JobStore, open_store
from ._options import EXIT_BUSY  # shared with serve, which exits the same way

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "DB_ENV",
    "EXIT_BUSY",
    "EXIT_CANCELLED",
    "EXIT_DONE",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "PrintableFormatter",
    "UsageError",
    "ask",
    "db_target",
    "default_db",
    "open_db",
    "print_json",
    "report_error",
    "stderr_console",
    "stdout_console",
    "targets_json",
]

T = TypeVar("T")


EXIT_DONE = 0


EXIT_FAILED = 1


EXIT_USAGE = 2


EXIT_CANCELLED = 130


#: Environment variable that overrides the default database path.
DB_ENV = "TRIO_BATCH_DB"


def default_db() -> Path | str:
    """The database used without ``--db``: ``$TRIO_BATCH_DB``, else the user data directory's."""
    env = os.environ.get(DB_ENV)
    if env:
        return db_target(env)
    import platformdirs

    return platformdirs.user_data_path("trio-batch", appauthor=False) / "trio-batch.db"


def db_target(text: str) -> Path | str:
    """A ``--db`` value: a URL (``postgresql://...``, ``sqlite:...``) as given, else a path."""
    return text if "://" in text or text.startswith("sqlite:") else Path(text)


class UsageError(Exception):
    """Bad input: reported as ``trio-batch: message`` with exit code 2."""


class PrintableFormatter(logging.Formatter):
    """Log lines escaped for the terminal: a message may quote a URL, a request path or
    fetched text (see :func:`~trio_batch._text.printable`)."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), multiline=True)


def report_error(message: str) -> None:
    """``trio-batch: message`` on stderr; the message may quote input, so it is escaped."""
    print(f"trio-batch: {printable(message)}", file=sys.stderr)


#: Width of tables written to a pipe or file (a terminal's own width is used otherwise).
PIPE_WIDTH = 120


def _console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False, soft_wrap=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


def stdout_console() -> Console:
    return _console()


def stderr_console() -> Console:
    return _console(stderr=True)


@contextlib.contextmanager
def open_db(
    path: Path | str | None,
    *,
    create: bool,
    store_timeout: float | None = None,
    listen_url: str | None = None,
) -> Iterator[JobStore | None]:
    """Open the store at ``path`` (or the default); None if it does not exist and not create.
    ``store_timeout`` and ``listen_url``: see :func:`~trio_batch.open_store`."""
    explicit = path is not None
    db = default_db() if path is None else path
    if isinstance(db, Path) and str(db) != ":memory:" and not db.exists():
        if not create:
            yield None
            return
        if not explicit:
            db.parent.mkdir(parents=True, exist_ok=True)
    try:
        store = open_store(db, store_timeout=store_timeout, listen_url=listen_url)
    except (StoreError, ValueError) as exc:
        raise UsageError(f"{exc} (--db {db})") from None
    try:
        yield store
    finally:
        trio.run(store.aclose)


def ask(store: JobStore, call: Callable[[JobStore], Awaitable[T]]) -> T:
    """Run one store call from the synchronous command line."""

    async def ask() -> T:
        return await call(store)

    return trio.run(ask)


def targets_json(targets: list[TargetStatus]) -> list[dict[str, Any]]:
    return [t.to_json() for t in targets]


def print_json(obj: object, file: IO[str] | None = None) -> None:
    """``obj`` as indented JSON, every control character escaped (it may go to a terminal)."""
    text = printable_json(json.dumps(obj, ensure_ascii=False, indent=2))
    (file or sys.stdout).write(text + "\n")
