"""The service's Prometheus metrics: store write and call times, fetch times, attempts by
outcome, requests answered, and the store's jobs and targets by status, read at scrape time
(:meth:`Metrics.set_store_counts`), and the built-in fetcher's per-host figures, read at scrape
time too (:meth:`Metrics.set_host_figures`).

Fetch and store-call figures come through the runner's tracing hooks (:class:`Metered`, around
whatever tracer the service has); with a tracer on, they carry the trace id as an exemplar
(shown in the OpenMetrics format, which ``/metrics`` answers when the scraper asks for it)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from .._model import Job, Target
from .._tracing import Method, Tracing, WrappedStore, current_ids, error_class, store_backend
from ..fetchers import HostFigures
from ..store import StoreCounts

__all__ = ["Metered", "Metrics", "RequestCounter", "StreamCut"]

S = TypeVar("S")

#: Fetches take from milliseconds (a local file) to the target timeout (minutes).
_FETCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_STORE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5)

_log = logging.getLogger("trio_batch.http")


class Metrics:
    """The service's Prometheus metrics, in a registry of its own (not the global one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.write_seconds = Histogram(
            "trio_batch_store_write_seconds",
            "Time the runner waited for a store write: a job's creation, or one commit of the "
            "target outcomes ready at the same moment.",
            ["operation"],
            registry=self.registry,
            buckets=_STORE_BUCKETS,
        )
        self.store_call_seconds = Histogram(
            "trio_batch_store_call_seconds",
            "Time one store call took, as the runner and the handlers saw it, by backend and "
            "operation.",
            ["backend", "operation"],
            registry=self.registry,
            buckets=_STORE_BUCKETS,
        )
        self.fetch_seconds = Histogram(
            "trio_batch_fetch_seconds",
            "Time one attempt at a target took in the fetch function, by outcome.",
            ["outcome"],
            registry=self.registry,
            buckets=_FETCH_BUCKETS,
        )
        self.attempts = Counter(
            "trio_batch_attempts",
            "Attempts at targets by outcome (done, failed, interrupted) and, for failures, the "
            "error's class (an exception's name, timeout, cancelled).",
            ["outcome", "error_type"],
            registry=self.registry,
        )
        for operation in ("create_job", "record_outcomes"):
            self.write_seconds.labels(operation)
        self.requests = Counter(
            "trio_batch_http_requests",
            "HTTP requests answered, by route and status code (500s included).",
            ["route", "code"],
            registry=self.registry,
        )
        self.disconnects = Counter(
            "trio_batch_http_disconnects",
            "Requests whose client went away before the answer was sent, by route.",
            ["route"],
            registry=self.registry,
        )

        # Both count what the store holds within the retention window (unexpired jobs),
        # whichever process wrote it, so they are gauges, not counters.
        self.jobs = Gauge(
            "trio_batch_jobs", "Unexpired jobs by status.", ["status"], registry=self.registry
        )
        self.targets = Gauge(
            "trio_batch_targets",
            "Targets of unexpired jobs: done, failed, unfinished (pending or running in a live "
            "job) or abandoned (left without an outcome by a cancelled or failed job).",
            ["status"],
            registry=self.registry,
        )
        self.hosts = _HostCollector()
        self.registry.register(self.hosts)
        self.snapshot_counts = _SnapshotCollector()
        self.registry.register(self.snapshot_counts)

    def set_host_figures(self, figures: Sequence[HostFigures]) -> None:
        """Replace the per-host figures the next scrape reports (taken on the event loop)."""
        self.hosts.figures = list(figures)

    def set_snapshot_counts(self, counts: Mapping[str, int]) -> None:
        """Replace the snapshot counts the next scrape reports (the fetcher's, taken now)."""
        self.snapshot_counts.counts = dict(counts)

    def observe_write(self, operation: str, seconds: float) -> None:
        """Record one store write (the runner's ``on_store_write`` hook)."""
        self.write_seconds.labels(operation).observe(seconds)

    def set_store_counts(self, counts: StoreCounts) -> None:
        """Set the jobs and targets gauges from what the store holds now (read per scrape)."""
        for status, count in counts.jobs.items():
            self.jobs.labels(status).set(count)
        self.targets.labels("done").set(counts.targets_succeeded)
        self.targets.labels("failed").set(counts.targets_failed)
        self.targets.labels("unfinished").set(counts.targets_unfinished)
        self.targets.labels("abandoned").set(counts.targets_abandoned)


def _exemplar() -> dict[str, str] | None:
    ids = current_ids()
    return None if ids is None else {"trace_id": ids[0], "span_id": ids[1]}


class _Attempt:
    """An attempt being timed, with the inner tracer's handle."""

    __slots__ = ("exemplar", "inner", "started")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.exemplar = _exemplar()  # inside the attempt's span, when a tracer is on
        self.started = time.perf_counter()


class Metered(Tracing):
    """``inner``'s tracing, with fetch times, attempts and store-call times in ``metrics``."""

    enabled = True

    def __init__(self, inner: Tracing, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics

    def job_started(self, job_id: str, caller_class: str, targets_total: int) -> Any:
        return self.inner.job_started(job_id, caller_class, targets_total)

    def trace_context(self, span: Any) -> str | None:
        return self.inner.trace_context(span)

    def job_reaped(self, job_id: str, trace_context: str | None, reason: str) -> None:
        self.inner.job_reaped(job_id, trace_context, reason)

    def delivery(self, trace_context: str | None) -> contextlib.AbstractContextManager[str | None]:
        return self.inner.delivery(trace_context)

    def enter_job(self, span: Any) -> None:
        self.inner.enter_job(span)

    def job_ended(self, span: Any, job: Job | None, *, cancelled: bool) -> None:
        self.inner.job_ended(span, job, cancelled=cancelled)

    def job_failed(self, span: Any, exc: BaseException) -> None:
        self.inner.job_failed(span, exc)

    @contextlib.contextmanager
    def attempt(self, span: Any, idx: int, target: Target, attempt: int) -> Iterator[Any]:
        with self.inner.attempt(span, idx, target, attempt) as inner:
            timed = _Attempt(inner)
            try:
                yield timed
            except BaseException:
                self._observe(timed, "interrupted", "")
                raise

    def attempt_ended(self, handle: Any, error: str | None) -> None:
        self.inner.attempt_ended(handle.inner, error)
        if error is None:
            self._observe(handle, "done", "")
        else:
            self._observe(handle, "failed", error_class(error))

    def _observe(self, timed: _Attempt, outcome: str, error_type: str) -> None:
        seconds = time.perf_counter() - timed.started
        self.metrics.fetch_seconds.labels(outcome).observe(seconds, timed.exemplar)
        self.metrics.attempts.labels(outcome, error_type).inc(exemplar=timed.exemplar)

    def retry_wait(self, span: Any, idx: int, attempt: int, delay: float) -> None:
        self.inner.retry_wait(span, idx, attempt, delay)

    def event(self, name: str, attributes: Mapping[str, str | int | float | bool]) -> None:
        self.inner.event(name, attributes)

    def current_ids(self) -> tuple[str, str] | None:
        return self.inner.current_ids()

    def wrap_store(self, store: S) -> S:
        inner = self.inner.wrap_store(store)
        backend = store_backend(store)
        histogram = self.metrics.store_call_seconds

        def wrap(operation: str, method: Method) -> Method:
            observe = histogram.labels(backend, operation).observe

            async def timed(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await method(*args, **kwargs)
                finally:
                    observe(time.perf_counter() - started, _exemplar())

            return timed

        return WrappedStore(inner, wrap)  # type: ignore[return-value]

    def remote_parent(self, headers: Mapping[str, str]) -> contextlib.AbstractContextManager[None]:
        return self.inner.remote_parent(headers)


class _HostCollector(Collector):
    """The built-in fetcher's per-host figures, as they were when the scrape began.

    A host forgotten as idle (the fetcher remembers a bounded number) drops out, and its
    counters start again from zero if it comes back, which Prometheus reads as a reset.
    """

    def __init__(self) -> None:
        self.figures: list[HostFigures] = []

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "trio_batch_fetch_host_requests",
            "Requests the built-in fetcher sent to a host, redirect hops included.",
            labels=["host"],
        )
        throttled = CounterMetricFamily(
            "trio_batch_fetch_host_throttled",
            "429 answers (and 503 with Retry-After) from a host; each paused the host.",
            labels=["host"],
        )
        paused = CounterMetricFamily(
            "trio_batch_fetch_host_paused_seconds",
            "Seconds of host-wide pause those answers set.",
            labels=["host"],
        )
        in_flight = GaugeMetricFamily(
            "trio_batch_fetch_host_in_flight",
            "Requests to a host in flight now.",
            labels=["host"],
        )
        waiting = GaugeMetricFamily(
            "trio_batch_fetch_host_waiting",
            "Requests waiting for their turn at a host (its limit, rate or pause) now.",
            labels=["host"],
        )
        for f in self.figures:
            requests.add_metric([f.host], f.requests)
            throttled.add_metric([f.host], f.throttled)
            paused.add_metric([f.host], f.paused_seconds)
            in_flight.add_metric([f.host], f.in_flight)
            waiting.add_metric([f.host], f.waiting)
        yield from (requests, throttled, paused, in_flight, waiting)


class StreamCut(Exception):
    """Raised by a streamed answer that cannot be finished (its job was deleted midway):
    :class:`RequestCounter` ends the request without the stream's last chunk, so the server
    closes the connection and the client sees an incomplete body, never a complete one."""


class _SnapshotCollector(Collector):
    """The built-in fetcher's snapshot counts (``HttpFetcher.snapshot_counts``), by outcome:
    responses kept, replayed, missing from a replayed snapshot, and revalidations answered
    304 (``not_modified``) or with a new body (``modified``)."""

    OUTCOMES = ("recorded", "replayed", "replay_missed", "not_modified", "modified")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "trio_batch_fetch_snapshot_responses",
            "Responses the built-in fetcher kept in or took from snapshots, by outcome: "
            "recorded, replayed, replay_missed, and revalidations not_modified or modified.",
            labels=["outcome"],
        )
        for outcome in self.OUTCOMES:
            family.add_metric([outcome], self.counts.get(outcome, 0))
        yield family


class RequestCounter:
    """ASGI middleware counting answered requests by route template (never raw path) and code.

    It sits inside Starlette's error middleware, so a handler that fails unexpectedly is
    counted here as a 500 (the error middleware then answers and logs it). A client that goes
    away mid-request is counted as a disconnect and logged quietly, not as a server error.
    """

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        disconnected = False

        def route() -> str:
            return str(getattr(scope.get("route"), "path", "unmatched"))

        async def watching_receive() -> Any:
            nonlocal disconnected
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected = True
            return message

        async def counting_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self.metrics.requests.labels(route(), str(message["status"])).inc()
            await send(message)

        try:
            await self.app(scope, watching_receive, counting_send)
        except ClientDisconnect:
            self.metrics.disconnects.labels(route()).inc()
            _log.info("client went away during %s %s", scope.get("method"), route())
        except StreamCut as cut:
            if not started:
                raise
            _log.warning("cut %s %s: %s", scope.get("method"), route(), cut)
        except Exception:
            if disconnected:
                self.metrics.disconnects.labels(route()).inc()
                _log.info("client went away during %s %s", scope.get("method"), route())
                return
            if not started:
                self.metrics.requests.labels(route(), "500").inc()
            raise
