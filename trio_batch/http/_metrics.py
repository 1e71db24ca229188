"""The service's Prometheus metrics: store write times, requests answered, and the store's
jobs and targets by status, read at scrape time (:meth:`Metrics.set_store_counts`)."""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from ..store import StoreCounts

__all__ = ["Metrics", "RequestCounter"]

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
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5),
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
        except Exception:
            if disconnected:
                self.metrics.disconnects.labels(route()).inc()
                _log.info("client went away during %s %s", scope.get("method"), route())
                return
            if not started:
                self.metrics.requests.labels(route(), "500").inc()
            raise
