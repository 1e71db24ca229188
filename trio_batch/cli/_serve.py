"""``trio-batch serve``'s command line: its options, and running the service from them."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING

import trio

from .._config import Config
from .._errors import StoreError, StoreLocked
from .._text import MAX_INT64, printable
from ..fetchers import (
    DestinationPolicy,
    WebhookSender,
    builtin_fetch,
    load_fetch,
    load_webhook_secret,
)
from ..http import Auth, HeaderAuth, TokenAuth, create_app, serve
from ..http._app import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY
from ..http._serve import check_bind
from ._common import PrintableFormatter
from ._logs import JsonFormatter, add_log_format_argument
from ._options import (
    EXIT_BUSY,
    add_fetch_limits,
    add_politeness,
    add_store_options,
    politeness,
    positive_number,
    retry_policy,
    whole_number,
)
from ._snapshots import add_snapshot_dir, snapshot_store
from ._telemetry import add_otel_argument, setup_tracing

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["add_serve_arguments", "run_serve", "serve_main", "serve_parser"]

_log = logging.getLogger("trio_batch.http")


#: The :class:`Config` fields that are options of their own, and what each says.
_CONFIG_OPTIONS = {
    "ttl": "seconds a job and its results are kept after its latest write",
    "targets_per_job": "most targets in one job",
    "jobs_per_caller": "most live jobs per caller",
    "jobs_total": "most live jobs in all",
    "heartbeat_interval": "seconds between heartbeats (runners sharing a PostgreSQL db)",
    "runner_timeout": "seconds of silence after which a runner is taken for dead",
    "poll_interval": "seconds between polls for other runners' cancels",
}


def _bind(text: str) -> str:
    """``--bind``'s type: a usage error before anything is opened, not a traceback after."""
    try:
        return check_bind(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``trio-batch serve``'s options to ``parser`` (for the command line to dispatch)."""
    parser.add_argument(
        "--db",
        required=True,
        metavar="PATH|URL",
        help="the SQLite job database, or a postgresql:// URL that several servers may share",
    )
    parser.add_argument(
        "--bind",
        type=_bind,
        default="127.0.0.1:8000",
        metavar="HOST:PORT",
        help="where to listen (default: %(default)s; port 0 picks a free port)",
    )
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument(
        "--tokens",
        metavar="FILE",
        help="bearer tokens, one 'TOKEN CALLER [CLASS]' per line ('#' comments)",
    )
    who.add_argument(
        "--caller-header",
        metavar="NAME",
        help="take the caller from this request header (only behind a trusted gateway)",
    )
    parser.add_argument(
        "--allow-private",
        action="store_true",
        help="let the built-in fetcher reach loopback, private and link-local addresses; "
        "refused by default",
    )
    parser.add_argument(
        "--webhook-secret-file",
        metavar="FILE",
        help="a Standard Webhooks secret, one line such as whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw "
        "(base64 after the prefix): jobs submitted with "
        '"webhook": {"url": ...} get their terminal event POSTed there, signed with it; '
        "--allow-private also lets webhooks reach private addresses and plain http://",
    )
    parser.add_argument(
        "--allow-file",
        action="store_true",
        help="let the built-in fetcher read file:// URLs: any file the server process can "
        "read (its token file included), for every caller; refused by default",
    )
    parser.add_argument(
        "--host-metrics",
        action="store_true",
        help="report the built-in fetcher's figures per host on /metrics, which answers "
        "without credentials: it then names every host callers fetch; off by default",
    )
    parser.add_argument(
        "--process-timeout",
        type=positive_number("seconds"),
        default=10.0,
        metavar="SECONDS",
        help="the built-in fetcher's limit on processing one body (grep, jq, HTML, PDF), in "
        "a worker process that is killed past it (default: %(default)g)",
    )
    parser.add_argument(
        "--cancel-grace",
        type=positive_number("seconds", zero=True),
        default=5.0,
        metavar="SECONDS",
        help="after a cancel, how long the target being fetched may still run before it is "
        "cut and stored as failed 'cancelled' (default: %(default)g)",
    )
    add_fetch_limits(parser)
    add_store_options(parser)
    add_politeness(parser)
    parser.add_argument(
        "--fetch",
        metavar="MODULE:FUNCTION",
        help="use this async fetch function instead of the built-in fetcher",
    )
    parser.add_argument(
        "--max-body",
        type=whole_number(1, MAX_INT64),
        default=DEFAULT_MAX_BODY,
        metavar="BYTES",
        help="largest request body (default: %(default)s)",
    )
    parser.add_argument(
        "--body-timeout",
        type=positive_number("seconds"),
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="how long a request body may take to arrive; past it, 408 (default: %(default)g)",
    )
    for name, help_text in _CONFIG_OPTIONS.items():
        default = getattr(Config(), name)
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            # 0 takes the default, as Config does; int() and float() also read "٣" and "1_0".
            type=(
                whole_number(0, MAX_INT64)
                if isinstance(default, int)
                else positive_number("seconds", zero=True)
            ),
            default=default,
            help=f"{help_text} (default: {default:g})",
        )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    add_otel_argument(parser)
    add_log_format_argument(parser)
    add_snapshot_dir(parser)


def run_serve(args: argparse.Namespace) -> int:
    """Run ``trio-batch serve`` with parsed arguments; returns the exit code.

    Blocks until SIGINT or SIGTERM, then shuts down cleanly and returns 0; a second signal
    cuts the requests still in progress short, and the shutdown goes on as before. Prints
    ``listening on URL`` to standard output once the runner holds the store and the socket is
    bound. Bad arguments print an error to standard error and return 2; a failure to start
    prints one line to standard error and returns 3 if another runner holds the database (as
    ``trio-batch run`` does), 1 otherwise (an unusable database, the port in use).
    """
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if args.log_format == "json"
        else PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=args.log_level, handlers=[handler])
    # Hypercorn says "Running on URL" as soon as it binds, even when start-up then fails;
    # this command prints "listening on URL" once the service is really up.
    logging.getLogger("hypercorn.error").addFilter(
        lambda record: not record.getMessage().startswith("Running on ")
    )
    try:
        auth: Auth = (
            TokenAuth.from_file(args.tokens)
            if args.tokens is not None
            else HeaderAuth(args.caller_header)
        )
        fetch = (
            load_fetch(args.fetch)
            if args.fetch is not None
            else builtin_fetch(
                allow_private=args.allow_private,
                allow_file=args.allow_file,
                process_timeout=args.process_timeout,
                snapshots=snapshot_store(args),
                **politeness(args),
            )
        )
        config = Config(
            **{name: getattr(args, name) for name in _CONFIG_OPTIONS},
            store_timeout=args.store_timeout,
            target_timeout=args.target_timeout,
            cancel_grace=args.cancel_grace,
            retry=retry_policy(args.retries),
        )
        tracing, flush_traces = setup_tracing(args.otel)
        app = create_app(
            db=args.db,
            listen_db=args.listen_db,
            fetch=fetch,
            auth=auth,
            config=config,
            max_body=args.max_body,
            body_timeout=args.body_timeout,
            tracing=tracing,
            webhooks=_webhook_sender(args),
            host_metrics=args.host_metrics,
        )
    except (OSError, ValueError, TypeError) as exc:
        print(f"trio-batch serve: {printable(str(exc))}", file=sys.stderr)
        return 2

    async def main() -> None:
        # Received for the whole run: a second SIGTERM would otherwise kill the process
        # during the graceful shutdown (its live jobs left running), and a second SIGINT
        # raise KeyboardInterrupt in whatever code runs at that moment.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            await _serve_until_signalled(app, args.bind, signals)

    try:
        trio.run(main)
    except BaseException as exc:  # a group from the nurseries; KeyboardInterrupt re-raised
        message = _startup_failure(exc, args.bind)
        if message is None:
            raise
        print(f"trio-batch serve: {printable(message)}", file=sys.stderr)
        # As `trio-batch run`: a database another runner holds is not a failure of this one.
        held = any(isinstance(leaf, StoreLocked) for leaf in _leaves(exc))
        return EXIT_BUSY if held else 1
    finally:
        flush_traces()  # the spans of the last jobs, as far as the exporter's timeouts allow
    return 0


async def _serve_until_signalled(app: Starlette, bind: str, signals: AsyncIterator[int]) -> None:
    """Serve ``app`` until the first of ``signals`` (a graceful shutdown); a second one
    stops at once: requests still running are cut, and the runner still marks its live
    jobs failed (``shutdown``) and closes the store, shielded and bounded."""
    first = trio.Event()

    async with trio.open_nursery() as nursery:

        async def on_signals() -> None:
            async for signum in signals:
                _log.info("received %s", signal.Signals(signum).name)
                if first.is_set():
                    _log.warning("stopping now, without waiting for requests in progress")
                    nursery.cancel_scope.cancel()
                first.set()

        async def serving(task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(
                app,
                bind=bind,
                shutdown_trigger=first.wait,
                freeze_heap=True,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel()  # the service is down: no signal is waited for

        nursery.start_soon(on_signals)
        for url in await nursery.start(serving):
            print(f"listening on {url}", flush=True)


def _webhook_sender(args: argparse.Namespace) -> WebhookSender | None:
    """The webhook sender ``--webhook-secret-file`` asks for, through the same SSRF policy as
    the fetcher's; None without it. Raises ValueError for a bad secret file."""
    if args.webhook_secret_file is None:
        return None
    secret = load_webhook_secret(args.webhook_secret_file)
    return WebhookSender(secret, DestinationPolicy(allow_private=args.allow_private))


def _startup_failure(exc: BaseException, bind: str) -> str | None:
    """One line for a failure to start (the store, the socket), or None for anything else."""
    leaves = list(_leaves(exc))
    if any(not isinstance(leaf, Exception) for leaf in leaves):
        return None  # KeyboardInterrupt, SystemExit, Cancelled: not ours to turn into a line
    for leaf in leaves:
        if isinstance(leaf, StoreError):
            return str(leaf)
    for leaf in leaves:
        if isinstance(leaf, OSError):
            return f"cannot listen on {bind}: {leaf.strerror or leaf}"
    return None


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions in ``exc``'s groups, each followed by the ones it was raised from
    (Hypercorn reports a failed lifespan as a LifespanFailureError raised from the cause)."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
        return
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def serve_parser() -> argparse.ArgumentParser:
    """``trio-batch serve``'s argument parser (the docs' CLI reference is made from it)."""
    parser = argparse.ArgumentParser(
        prog="trio-batch serve", description="Serve the trio-batch HTTP API."
    )
    add_serve_arguments(parser)
    return parser


def serve_main(argv: Sequence[str] | None = None) -> int:
    """``trio-batch serve`` as a stand-alone command (also ``python -m trio_batch serve``)."""
    return run_serve(serve_parser().parse_args(argv))
