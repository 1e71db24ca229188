"""``open_runner``: a runner's life on a store: claim, reap, serve, shut down."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import trio

from .._config import Config
from .._errors import StoreUnavailable
from .._retry import RetryNotice
from .._tracing import NO_TRACING, Tracing
from ..store import HostLimits, JobStore, ReapedJob, SQLiteJobStore, Store, WriteObserver
from ._cluster import poll_drain_changes
from ._deliveries import WebhookDeliverer
from ._purge import purge_periodically
from ._runner import FetchFunc, Runner

__all__ = ["open_runner", "otel_tracing"]


def otel_tracing(
    tracer_provider: Any = None, *, full_urls: bool = False, store_spans: bool = True
) -> Tracing:
    """Tracing through OpenTelemetry, for :func:`open_runner`'s ``tracing``.

    A span per job (from submit to its terminal status, linked to the span current at submit),
    a child span per attempt at a target (the fetch runs inside it) and per store call of the
    job's drain; retry waits are events of the job's span. ``tracer_provider`` defaults to the
    global one, set up by the host program (or by ``trio-batch serve --otel``). Attempt spans
    name the target's host only; ``full_urls=True`` adds the full URL, query string included.
    ``store_spans=False`` leaves out the store calls' spans, which are half the spans of a
    job and half the tracing's cost per target. Needs the ``trio-batch[otel]`` extra
    (``opentelemetry-api``): raises ImportError without it.
    """
    from .._otel import OtelTracing

    return OtelTracing(tracer_provider, full_urls=full_urls, store_spans=store_spans)


@asynccontextmanager
async def open_runner(
    store: JobStore | Store,
    fetch: FetchFunc,
    config: Config | None = None,
    *,
    now: Callable[[], float] = time.time,
    logger: logging.Logger | None = None,
    on_store_write: WriteObserver | None = None,
    on_retry: Callable[[RetryNotice], None] | None = None,
    tracing: Tracing = NO_TRACING,
    webhooks: WebhookDeliverer | None = None,
) -> AsyncIterator[Runner]:
    """Start a runner on ``store``; leaving the block shuts it down.

    ``store`` is any :class:`~trio_batch.JobStore` (see :func:`~trio_batch.open_store`), which
    the caller keeps and closes, or a plain SQLite :class:`~trio_batch.Store`, which the runner
    reaches through a :class:`~trio_batch.store.SQLiteJobStore` of its own.

    The runner claims the database (:meth:`JobStore.claim`): where the backend allows one
    runner only and another (in this process or another) holds it, :class:`StoreLocked` is
    raised at once. The claim is released when the block ends, and by the operating system if
    the process dies.

    On entry, every job left live by a runner that is gone is marked ``failed`` with error
    ``"restart"``; such jobs are never resumed, and their completed targets stay readable until
    their lease lapses. Lapsed jobs are purged now and every ``Config.purge_interval`` seconds.

    ``now`` is the wall clock used for leases (tests inject a fake one); trio's clock is used
    for everything that sleeps. ``logger`` defaults to ``logging.getLogger("trio_batch")``.
    ``on_store_write``, if given, is called on the event loop with ``(operation, seconds)``
    after each job creation (``"create_job"``) and each outcome commit (``"record_outcomes"``,
    one call per group commit): a hook for metrics; it must be quick and not raise.
    ``on_retry``, if given, is called on the event loop with a :class:`RetryNotice` each time a
    target's attempt failed and will be retried (see ``Config.retry``); for progress displays.
    ``tracing``: :func:`~trio_batch.otel_tracing` for a span per job, per attempt at a target
    and per store call of a drain (OpenTelemetry, the ``trio-batch[otel]`` extra); off by
    default, at the cost of a method call per event.
    ``webhooks``, if given, sends the terminal events of jobs submitted with a webhook URL
    (``trio-batch serve`` wires :class:`trio_batch.fetchers.WebhookSender`). With it or
    ``Config.on_terminal``, a task delivers the outbox's events (see
    :mod:`trio_batch.runner._deliveries`), also those a previous run left undelivered.

    A ``fetch`` that is also an async context manager (``HttpFetcher`` is: its connection pool
    and per-host limits) is entered before the first job and left after the last outcome is
    stored, so the runner's jobs share what it holds and it is closed with the runner.

    On exit (normal, by exception or by cancellation) in-flight fetches are cancelled, every
    outcome already being stored is completed, and every job of this runner still live is
    marked ``failed`` with error ``"shutdown"``. Afterwards every runner method raises
    :class:`RunnerClosed`. An exception raised in the body comes out as itself, not wrapped in
    an exception group.
    """
    config = Config() if config is None else config
    log = logging.getLogger("trio_batch") if logger is None else logger
    job_store = SQLiteJobStore(store) if isinstance(store, Store) else store
    try:
        async with job_store.claim(
            heartbeat_interval=config.heartbeat_interval, runner_timeout=config.runner_timeout
        ):
            observer, job_store.on_write = job_store.on_write, on_store_write
            if tracing.enabled:
                job_store.on_reaped = functools.partial(_traced_reap, tracing)
            try:
                async with (
                    _entered(fetch, job_store),
                    _running(
                        tracing.wrap_store(job_store),
                        fetch,
                        config,
                        now,
                        log,
                        on_retry,
                        tracing,
                        webhooks,
                    ) as runner,
                ):
                    yield runner
            finally:
                job_store.on_write = observer
                job_store.on_reaped = None
    finally:
        if job_store is not store:
            with trio.CancelScope(shield=True):
                await job_store.aclose()


@asynccontextmanager
async def _entered(fetch: FetchFunc, store: JobStore) -> AsyncIterator[None]:
    """Hold ``fetch`` open for the runner's life if it is an async context manager; one that
    takes per-host limits (``use_host_limits``, as ``HttpFetcher``) and has none of its own
    shares them through ``store`` when it keeps them (PostgreSQL), for the runner's life."""
    use: Callable[[HostLimits | None], None] | None = getattr(fetch, "use_host_limits", None)
    limits = store if isinstance(store, HostLimits) else None
    if limits is None or getattr(fetch, "host_limits", None) is not None:
        use = None
    if use is not None:
        use(limits)
    try:
        if isinstance(fetch, AbstractAsyncContextManager):
            async with fetch:
                yield
        else:
            yield
    finally:
        if use is not None and getattr(fetch, "host_limits", None) is limits:
            use(None)


@asynccontextmanager
async def _running(
    store: JobStore,
    fetch: FetchFunc,
    config: Config,
    now: Callable[[], float],
    log: logging.Logger,
    on_retry: Callable[[RetryNotice], None] | None,
    tracing: Tracing,
    webhooks: WebhookDeliverer | None,
) -> AsyncIterator[Runner]:
    """The runner's life on a claimed store: reap, serve, then shut down."""
    runner: Runner | None = None
    try:
        reaped = await store.reap_orphans(now=now())
        if reaped:
            log.warning(
                "jobs left live by a previous run marked failed", extra={"jobs": len(reaped)}
            )
            _traced_reap(tracing, reaped)
        body_error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            runner = Runner(
                store=store,
                fetch=fetch,
                config=config,
                now=now,
                logger=log,
                nursery=nursery,
                on_retry=on_retry,
                tracing=tracing,
                webhooks=webhooks,
            )
            nursery.start_soon(
                purge_periodically,
                runner.purge_expired,
                config.purge_interval,
                log,
                name="trio_batch purge",
            )
            if runner._deliveries.enabled:
                nursery.start_soon(runner._deliveries.run, name="trio_batch deliveries")
            cluster, changes = runner._cluster, runner._elsewhere
            if cluster is not None:  # other runners may change this one's jobs
                nursery.start_soon(
                    poll_drain_changes,
                    cluster,
                    runner._drains,
                    changes,
                    config,
                    log,
                    runner._drains.adopt_undrained,
                    name="trio_batch poll",
                )
                listen = cluster.listen_changes
                nursery.start_soon(listen, changes.changed, name="trio_batch listen")
            try:
                yield runner
            except BaseException as exc:
                body_error = exc  # re-raised below, outside the nursery, so it is not wrapped
            finally:
                runner._closed = True
                nursery.cancel_scope.cancel()
        if body_error is not None:
            raise body_error
    finally:
        with trio.CancelScope(shield=True):
            marked_ok = False
            try:
                stopped = await store.fail_own_jobs("shutdown", now=now())
                marked_ok = True
                if stopped:
                    log.info("live jobs marked failed at shutdown", extra={"jobs": stopped})
            except StoreUnavailable:
                # Leave them: the next start reaps them as "restart". Raising here would hide
                # whatever ended the block.
                log.error("could not mark live jobs failed at shutdown", exc_info=True)
            finally:
                if runner is not None:
                    runner._waits.shutdown_marked_ok = marked_ok
                    runner._stopped = True
                    runner._waits.shutdown_marked.set()


def _traced_reap(tracing: Tracing, reaped: Sequence[ReapedJob]) -> None:
    """A span per reaped job, in the job's trace (from its stored context)."""
    for job in reaped:
        tracing.job_reaped(job.job_id, job.trace_context, "restart")
