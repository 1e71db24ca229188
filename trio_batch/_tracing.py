"""The tracing seam: what the runner tells a tracer, one call per event.

:class:`Tracing` itself traces nothing: every hook returns at once, so a runner without tracing
(the default) pays a method call per event and imports nothing more.
:func:`trio_batch.otel_tracing` gives the OpenTelemetry implementation
(:mod:`trio_batch._otel`), importing the ``opentelemetry-api`` package (the
``trio-batch[otel]`` extra) only when it is called.

The handles the hooks pass around (a job's span, an attempt's span) are opaque here: ``None``
when tracing is off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ._model import Job, Target

__all__ = ["NO_TRACING", "Tracing", "current_ids", "note", "set_event_sink"]

S = TypeVar("S")


class Tracing:
    """The hooks the runner, the store and the front ends call; this base class does nothing.

    Subclass it to plug in another tracer. Every hook must be quick and must not raise: they
    run on the event loop, inside the drain of a job.
    """

    #: False for this no-op base: callers may skip work done only to feed a tracer.
    enabled = False

    def job_started(self, job: Job) -> Any:
        """A job was created (not reused) by :meth:`Runner.submit`; returns the job's handle."""
        return None

    def enter_job(self, span: Any) -> None:
        """Make the job's span current in the calling task (the job's drain task)."""

    def job_ended(self, span: Any, job: Job | None, *, cancelled: bool) -> None:
        """The job's drain stopped. ``job`` is as last stored (None once lapsed); ``cancelled``:
        a cancel reached it. A job left live (shutdown, a reap, a drain failure) has failed."""

    def job_failed(self, span: Any, exc: BaseException) -> None:
        """The job's drain failed with ``exc`` (the store stayed unavailable, or a bug)."""

    @contextlib.contextmanager
    def attempt(self, span: Any, idx: int, target: Target, attempt: int) -> Iterator[Any]:
        """Around one attempt at a target (the fetch runs inside); yields the attempt's handle."""
        yield None

    def attempt_ended(self, handle: Any, error: str | None) -> None:
        """The attempt ended: ``error`` is the stored failure's error, None on success."""

    def retry_wait(self, span: Any, idx: int, attempt: int, delay: float) -> None:
        """Attempt ``attempt`` at target ``idx`` failed; the next starts in ``delay`` seconds."""

    def event(self, name: str, attributes: Mapping[str, str | int | float | bool]) -> None:
        """Something worth noting happened in the current span (e.g. a pause before a fetch)."""

    def current_ids(self) -> tuple[str, str] | None:
        """The current trace and span ids in hex (for log lines), or None outside any span."""
        return None

    def wrap_store(self, store: S) -> S:
        """The store the runner should call: this one, or one that traces each call."""
        return store

    @contextlib.contextmanager
    def remote_parent(self, headers: Mapping[str, str]) -> Iterator[None]:
        """Within the block, the trace context carried by ``headers`` (W3C ``traceparent``)
        is current, so a job submitted there links to the caller's trace."""
        yield


#: The default: no tracing.
NO_TRACING = Tracing()

# Where note() sends events and current_ids() asks: the last tracer made, since a fetcher or a
# log formatter cannot see its runner's.
_event_sink: Tracing = NO_TRACING


def set_event_sink(tracing: Tracing) -> None:
    """Send :func:`note` and :func:`current_ids` to ``tracing`` (done when a tracer is made)."""
    global _event_sink
    _event_sink = tracing


def note(name: str, attributes: Mapping[str, str | int | float | bool]) -> None:
    """Add an event to the current span, if a tracer is on: for code below the runner, such
    as a fetcher's pause before a host, which has no handle of its own."""
    _event_sink.event(name, attributes)


def current_ids() -> tuple[str, str] | None:
    """The current trace and span ids in hex, if a tracer is on and a span is current."""
    return _event_sink.current_ids()
