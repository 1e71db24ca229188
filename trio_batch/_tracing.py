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
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ._model import Job, Target

__all__ = [
    "NO_TRACING",
    "STORE_OPERATIONS",
    "Tracing",
    "WrappedStore",
    "current_ids",
    "error_class",
    "note",
    "set_event_sink",
    "store_backend",
]

S = TypeVar("S")


#: The block that does nothing (reusable), for the hooks of the no-op tracer.
_NOTHING = contextlib.nullcontext()


class Tracing:
    """The hooks the runner, the store and the front ends call; this base class does nothing.

    Subclass it to plug in another tracer. Every hook must be quick and must not raise: they
    run on the event loop, inside the drain of a job.
    """

    #: False for this no-op base: callers may skip work done only to feed a tracer.
    enabled = False

    def job_started(self, job_id: str, caller_class: str, targets_total: int) -> Any:
        """:meth:`Runner.submit` is about to create job ``job_id``, or the runner's poll adopts
        it (its create committed, its answer lost); returns the job's handle.

        A handle whose job is not created (a reuse, a refusal) is dropped without
        :meth:`job_ended`."""
        return None

    def trace_context(self, span: Any) -> str | None:
        """The job's span as a W3C ``traceparent``, stored with the job; None: store none."""
        return None

    def job_reaped(self, job_id: str, trace_context: str | None, reason: str) -> None:
        """This runner failed job ``job_id``, left live by another (or a previous) runner;
        ``trace_context`` is the one stored with it."""

    def delivery(self, trace_context: str | None) -> contextlib.AbstractContextManager[str | None]:
        """Around one delivery of a job's event (``trace_context``: the job's, as stored);
        gives the ``traceparent`` the request carries (None: no header)."""
        return contextlib.nullcontext(trace_context)

    def enter_job(self, span: Any) -> None:
        """Make the job's span current in the calling task (the job's drain task)."""

    def job_ended(self, span: Any, job: Job | None, *, cancelled: bool) -> None:
        """The job's drain stopped. ``job`` is as last stored (None once lapsed); ``cancelled``:
        a cancel reached it. A job left live (shutdown, a reap, a drain failure) has failed."""

    def job_failed(self, span: Any, exc: BaseException) -> None:
        """The job's drain failed with ``exc`` (the store stayed unavailable, or a bug)."""

    def attempt(
        self, span: Any, idx: int, target: Target, attempt: int
    ) -> contextlib.AbstractContextManager[Any]:
        """Around one attempt at a target (the fetch runs inside); gives the attempt's handle."""
        return _NOTHING

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

    def remote_parent(self, headers: Mapping[str, str]) -> contextlib.AbstractContextManager[None]:
        """Within the block, the trace context carried by ``headers`` (W3C ``traceparent``)
        is current, so a job submitted there links to the caller's trace."""
        return _NOTHING


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


#: The store calls a tracer may wrap (:class:`WrappedStore`): every bounded call of the
#: store interface. The rest pass through: ``listen_changes`` lasts the runner's life, and
#: ``aclose`` and ``claim`` are its start and end, not calls on its data.
STORE_OPERATIONS = (
    "create_job",
    "record_outcome",
    "finish_job",
    "reap_orphans",
    "fail_own_jobs",
    "drain_changes",
    "undrained_jobs",
    "release_job",
    "watch_job",
    "drain_over",
    "purge_expired",
    "forget_job",
    "get_job",
    "get_status",
    "get_overview",
    "get_target",
    "get_outcomes",
    "list_jobs",
    "list_caller_jobs",
    "get_targets_after",
    "latest_retry",
    "retries",
    "counts",
    "claim_delivery",
    "record_delivery",
    "get_delivery",
    "redeliver",
    "next_delivery_due",
)

Method = Callable[..., Awaitable[Any]]


def store_backend(store: object) -> str:
    """``"postgresql"`` or ``"sqlite"``: the backend of ``store``, from its location."""
    location = str(getattr(store, "location", ""))
    return "postgresql" if location.startswith(("postgres://", "postgresql://")) else "sqlite"


class WrappedStore:
    """A store whose :data:`STORE_OPERATIONS` go through ``wrap(operation, method)``; every
    other attribute is the store's own (setting ``on_write`` sets the store's)."""

    def __init__(self, store: object, wrap: Callable[[str, Method], Method]) -> None:
        object.__setattr__(self, "_store", store)
        for name in STORE_OPERATIONS:
            method = getattr(store, name, None)
            if method is not None and inspect.iscoroutinefunction(method):
                object.__setattr__(self, name, wrap(name, method))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._store, name, value)


def error_class(error: str) -> str:
    """The class of a stored failure: the exception's name before ``": "``, or the error."""
    return error.partition(": ")[0][:100]
