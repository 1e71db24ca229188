"""Tracing through the OpenTelemetry API (the ``trio-batch[otel]`` extra).

Imported only by :func:`trio_batch.otel_tracing`. A job's span is the root of a trace
of its own, linked to the span current when it was submitted (an HTTP request's, which
``serve`` takes from the request's ``traceparent``); each attempt at a target is a child of it,
and so is each store call the job's drain makes. Store calls made outside any span (the
runner's polls, heartbeats and purges) make no span: they would be a root span each. A
remote parent (a request's ``traceparent``) counts as a span.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import _tracing
from ._model import Job, Target
from ._version import __version__

__all__ = ["OtelTracing"]

S = TypeVar("S")
T = TypeVar("T")


class OtelTracing(_tracing.Tracing):
    """The :class:`~trio_batch._tracing.Tracing` hooks as OpenTelemetry spans and events."""

    enabled = True

    def __init__(
        self, tracer_provider: Any = None, *, full_urls: bool = False, store_spans: bool = True
    ) -> None:
        self.tracer = trace.get_tracer("trio_batch", __version__, tracer_provider=tracer_provider)
        self.full_urls = full_urls
        self.store_spans = store_spans
        _tracing.set_event_sink(self)

    def job_started(self, job_id: str, caller_class: str, targets_total: int) -> Span:
        parent = trace.get_current_span().get_span_context()
        return self.tracer.start_span(
            "trio_batch.job",
            context=otel_context.Context(),  # a trace of its own, linked to the submitter's
            kind=SpanKind.CONSUMER,
            links=[Link(parent)] if parent.is_valid else None,
            attributes={
                "trio_batch.job.id": job_id,
                "trio_batch.job.caller_class": caller_class,
                "trio_batch.job.targets_total": targets_total,
            },
        )

    def trace_context(self, span: Any) -> str | None:
        if span is None:
            return None
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, context=trace.set_span_in_context(span))
        return carrier.get("traceparent")

    def job_reaped(self, job_id: str, trace_context: str | None, reason: str) -> None:
        span = self.tracer.start_span(
            "trio_batch.job reaped",
            context=_stored(trace_context),
            attributes={"trio_batch.job.id": job_id, "trio_batch.job.error": reason},
        )
        span.set_status(Status(StatusCode.ERROR, reason))
        span.end()

    @contextlib.contextmanager
    def delivery(self, trace_context: str | None) -> Iterator[str | None]:
        with self.tracer.start_as_current_span(
            "trio_batch.webhook delivery", context=_stored(trace_context), kind=SpanKind.PRODUCER
        ) as span:
            yield self.trace_context(span)

    def enter_job(self, span: Any) -> None:
        if span is not None:
            # The drain task's own context, dropped with the task: nothing to detach.
            otel_context.attach(trace.set_span_in_context(span))

    def job_ended(self, span: Any, job: Job | None, *, cancelled: bool) -> None:
        if span is None:
            return
        if job is not None:
            span.set_attributes(
                {
                    "trio_batch.job.targets_done": job.targets_done,
                    "trio_batch.job.targets_failed": job.targets_failed,
                }
            )
        if job is not None and job.is_terminal:
            status = str(job.status)
        elif cancelled:
            status = "cancelled"
        elif job is None:
            status = "lapsed"
        else:
            status = "failed"  # left live, never resumed: shutdown, a reap, a drain failure
        span.set_attribute("trio_batch.job.status", status)
        if status == "failed":
            span.set_status(Status(StatusCode.ERROR, (job.error or "") if job else "failed"))
        span.end()

    def job_failed(self, span: Any, exc: BaseException) -> None:
        if span is not None:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))

    @contextlib.contextmanager
    def attempt(self, span: Any, idx: int, target: Target, attempt: int) -> Iterator[Any]:
        if span is None:
            yield None
            return
        attributes: dict[str, str | int] = {
            "trio_batch.target.idx": idx,
            "trio_batch.attempt": attempt,
        }
        host = _host(target.url)
        if host:
            attributes["server.address"] = host
        if self.full_urls:
            attributes["url.full"] = target.url
        with self.tracer.start_as_current_span(
            "trio_batch.attempt",
            context=trace.set_span_in_context(span),
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as child:
            try:
                yield child
            except BaseException:
                # Cancelled (shutdown, a reap elsewhere): the attempt has no outcome.
                child.set_attribute("trio_batch.outcome", "interrupted")
                raise

    def attempt_ended(self, handle: Any, error: str | None) -> None:
        if handle is None:
            return
        if error is None:
            handle.set_attribute("trio_batch.outcome", "done")
            return
        handle.set_attributes(
            {"trio_batch.outcome": "failed", "error.type": _tracing.error_class(error)}
        )
        handle.set_status(Status(StatusCode.ERROR, error))

    def retry_wait(self, span: Any, idx: int, attempt: int, delay: float) -> None:
        if span is not None:
            span.add_event(
                "trio_batch.retry_wait",
                {"trio_batch.target.idx": idx, "trio_batch.attempt": attempt, "delay_s": delay},
            )

    def event(self, name: str, attributes: Mapping[str, str | int | float | bool]) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(name, attributes)

    def current_ids(self) -> tuple[str, str] | None:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)

    def wrap_store(self, store: S) -> S:
        if not self.store_spans:
            return store
        backend = _tracing.store_backend(store)

        def wrap(operation: str, method: _tracing.Method) -> _tracing.Method:
            return _traced(method, operation, backend, self.tracer)

        return _tracing.WrappedStore(store, wrap)  # type: ignore[return-value]

    @contextlib.contextmanager
    def remote_parent(self, headers: Mapping[str, str]) -> Iterator[None]:
        token = otel_context.attach(propagate.extract(headers))
        try:
            yield
        finally:
            otel_context.detach(token)


def _traced(
    method: Callable[..., Awaitable[T]], operation: str, system: str, tracer: trace.Tracer
) -> Callable[..., Awaitable[T]]:
    """``method``, in a span when a span is current (else called as it is)."""
    attributes = {"db.system.name": system, "db.operation.name": operation}
    name = f"trio_batch.store {operation}"

    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> T:
        if not trace.get_current_span().get_span_context().is_valid:
            return await method(*args, **kwargs)
        span = tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        try:
            return await method(*args, **kwargs)
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            span.set_attribute("error.type", type(exc).__name__)
            raise
        finally:
            span.end()

    return call


#: The W3C trace context format, whatever the global propagator: a job's stored context is
#: always a traceparent.
_W3C = TraceContextTextMapPropagator()


def _stored(trace_context: str | None) -> otel_context.Context:
    """The context a stored ``traceparent`` names (an empty one for None: a new trace)."""
    if trace_context is None:
        return otel_context.Context()
    return _W3C.extract({"traceparent": trace_context}, context=otel_context.Context())


def _host(url: str) -> str | None:
    """The host of ``url``, or None: a target URL the runner accepts may not parse (``http://[``)."""
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None
