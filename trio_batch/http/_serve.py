"""Serving: :func:`serve` runs an application on Hypercorn's trio worker; the rest is
``trio-batch serve``'s command line."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import cast

import trio
from starlette.applications import Starlette

from .._config import Config
from ..fetchers import builtin_fetch, load_fetch
from ._app import DEFAULT_MAX_BODY, create_app
from ._auth import Auth, HeaderAuth, TokenAuth
from ._service import Service

__all__ = ["add_serve_arguments", "run_serve", "serve", "serve_main"]

_log = logging.getLogger("trio_batch.http")


async def serve(
    app: Starlette,
    *,
    bind: str = "127.0.0.1:8000",
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
    graceful_timeout: float = 5.0,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` (from :func:`create_app`) with Hypercorn's trio worker until shut down.

    ``bind`` is ``HOST:PORT`` (port 0 picks a free one); ``task_status.started`` receives the
    bound URLs, e.g. ``["http://127.0.0.1:50123"]``. When ``shutdown_trigger`` returns, new
    jobs are refused, event streams end, requests in progress get ``graceful_timeout`` seconds
    to finish, and the lifespan shuts the runner down (live jobs marked failed "shutdown").
    """
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.trio import serve as hypercorn_serve
    from hypercorn.typing import Framework

    config = HypercornConfig()
    config.bind = [bind]
    config.accesslog = None  # requests carry tokens; there is no access log to leak them into
    config.errorlog = logging.getLogger("hypercorn.error")  # through the host's logging set-up
    config.graceful_timeout = graceful_timeout
    config.include_server_header = False
    service: Service = app.state.service

    async def trigger() -> None:
        if shutdown_trigger is None:
            await trio.sleep_forever()
        else:
            await shutdown_trigger()
        _log.info("shutting down")
        service.begin_shutdown()

    await hypercorn_serve(
        cast(Framework, app), config, shutdown_trigger=trigger, task_status=task_status
    )


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
        help="let the built-in fetcher reach loopback, private and link-local addresses "
        "(and file:// URLs); refused by default",
    )
    parser.add_argument(
        "--fetch",
        metavar="MODULE:FUNCTION",
        help="use this async fetch function instead of the built-in fetcher",
    )
    parser.add_argument(
        "--max-body",
        type=int,
        default=DEFAULT_MAX_BODY,
        metavar="BYTES",
        help="largest request body (default: %(default)s)",
    )
    for name, help_text in (
        ("ttl", "seconds a job and its results are kept after its latest write"),
        ("targets-per-job", "most targets in one job"),
        ("jobs-per-caller", "most live jobs per caller"),
        ("jobs-total", "most live jobs in all"),
        ("heartbeat-interval", "seconds between heartbeats (runners sharing a PostgreSQL db)"),
        ("runner-timeout", "seconds of silence after which a runner is taken for dead"),
        ("poll-interval", "seconds between polls for other runners' cancels"),
    ):
        default = getattr(Config(), name.replace("-", "_"))
        parser.add_argument(
            f"--{name}",
            type=type(default),
            default=default,
            help=f"{help_text} (default: {default:g})",
        )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )


def run_serve(args: argparse.Namespace) -> int:
    """Run ``trio-batch serve`` with parsed arguments; returns the exit code.

    Blocks until SIGINT or SIGTERM, then shuts down cleanly and returns 0. Prints
    ``listening on URL`` to standard output once the socket is bound. Bad arguments print an
    error to standard error and return 2.
    """
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
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
            else builtin_fetch(allow_private=args.allow_private)
        )
        config = Config(
            ttl=args.ttl,
            targets_per_job=args.targets_per_job,
            jobs_per_caller=args.jobs_per_caller,
            jobs_total=args.jobs_total,
            heartbeat_interval=args.heartbeat_interval,
            runner_timeout=args.runner_timeout,
            poll_interval=args.poll_interval,
        )
        app = create_app(db=args.db, fetch=fetch, auth=auth, config=config, max_body=args.max_body)
    except (OSError, ValueError, TypeError) as exc:
        print(f"trio-batch serve: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        async def on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    _log.info("received %s", signal.Signals(signum).name)
                    return

        async with trio.open_nursery() as nursery:
            urls = await nursery.start(
                partial(serve, app, bind=args.bind, shutdown_trigger=on_signal)
            )
            for url in urls:
                print(f"listening on {url}", flush=True)

    trio.run(main)
    return 0


def serve_main(argv: Sequence[str] | None = None) -> int:
    """``trio-batch serve`` as a stand-alone command (``python -m trio_batch.http``)."""
    parser = argparse.ArgumentParser(
        prog="trio-batch serve", description="Serve the trio-batch HTTP API."
    )
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))
