"""The service's Prometheus metrics: store write times, requests answered, and the store's
jobs and targets by status, read at scrape time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import Receive, Scope, Send

from .. import Store
from .._model import JobState

__all__ = ["Metrics", "RequestCounter", "StoreCollector"]


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
            "HTTP requests answered, by route and status code.",
            ["route", "code"],
            registry=self.registry,
        )

    def observe_write(self, operation: str, seconds: float) -> None:
        """Record one store write (the runner's ``on_store_write`` hook)."""
        self.write_seconds.labels(operation).observe(seconds)


def _store_counts(store: Store, now: float) -> tuple[dict[str, int], int, int, int]:
    """Unexpired jobs by status, and their targets' total, done and failed sums, at ``now``.

    The one place the metrics read the store; every job status is present, zero if unseen.
    """
    jobs = dict.fromkeys((str(s) for s in JobState), 0)
    for status, count in store.db.execute(
        "SELECT status, count(*) FROM jobs WHERE expires_at > ? GROUP BY status", (now,)
    ).fetchall():
        jobs[str(status)] = int(count)
    total, done, failed = store.db.execute(
        "SELECT coalesce(sum(targets_total), 0), coalesce(sum(targets_done), 0), "
        "coalesce(sum(targets_failed), 0) FROM jobs WHERE expires_at > ?",
        (now,),
    ).fetchone()
    return jobs, total, done, failed


class StoreCollector(Collector):
    """Jobs and targets by status, read from the store at scrape time (on a worker thread).

    Both count what the store holds within the retention window (unexpired jobs), whichever
    process wrote it, so they are gauges, not counters. ``read_store`` gives the store to read
    (None while the service is not running: nothing is reported then); ``now`` the time.
    """

    def __init__(self, read_store: Callable[[], Store | None], now: Callable[[], float]) -> None:
        self._read_store = read_store
        self._now = now

    def describe(self) -> list[Metric]:
        """The metric families :meth:`collect` reports, without reading the store."""
        return [
            GaugeMetricFamily("trio_batch_jobs", "Unexpired jobs by status."),
            GaugeMetricFamily("trio_batch_targets", "Targets of unexpired jobs by status."),
        ]

    def collect(self) -> list[Metric]:
        """The jobs and targets gauges, as the store holds them now."""
        store = self._read_store()
        if store is None:
            return []
        jobs, total, done, failed = _store_counts(store, self._now())
        job_gauge = GaugeMetricFamily(
            "trio_batch_jobs", "Unexpired jobs by status.", labels=["status"]
        )
        for status, count in jobs.items():
            job_gauge.add_metric([status], count)
        target_gauge = GaugeMetricFamily(
            "trio_batch_targets",
            "Targets of unexpired jobs: done, failed, or not finished (pending or running).",
            labels=["status"],
        )
        target_gauge.add_metric(["done"], done - failed)
        target_gauge.add_metric(["failed"], failed)
        target_gauge.add_metric(["unfinished"], total - done)
        return [job_gauge, target_gauge]


class RequestCounter:
    """ASGI middleware counting answered requests by route template (never raw path) and code."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                route = getattr(scope.get("route"), "path", "unmatched")
                self.metrics.requests.labels(route, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counting_send)
