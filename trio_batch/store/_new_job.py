"""A new job's request checked and built, and the caps it is checked against: what every SQL
backend's create shares, so one rule says which cap refuses a job with which message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .._errors import Busy, CallerBusy, TooManyTargets
from .._model import (
    Job,
    JobState,
    Target,
    TargetState,
    check_caller,
    check_metadata,
    check_targets,
    idem_key,
    is_job_id,
    new_job_id,
)
from .._targets import check_webhook_text, plain_urls
from ._protocol import Admission, NewJob
from ._rows import dumps, options_text

__all__ = ["JobInsert", "check_caps", "check_counted_caps", "check_trace_context", "new_job"]


class JobInsert:
    """A checked job request: the job a create would insert, and its targets' rows."""

    __slots__ = ("job", "targets", "trace_context")

    def __init__(
        self, job: Job, targets: tuple[Target, ...], trace_context: str | None = None
    ) -> None:
        self.job = job
        self.targets = targets
        self.trace_context = trace_context

    def job_params(self) -> tuple[Any, ...]:
        """The job's values in job-column order (the order of :class:`Job`'s fields)."""
        j = self.job
        return (
            j.id,
            j.status.value,
            j.error,
            j.targets_total,
            j.targets_done,
            j.targets_failed,
            j.caller,
            j.caller_class,
            j.idem_key,
            j.created_at,
            j.updated_at,
            j.expires_at,
            dumps(j.metadata) if j.metadata else "{}",
            j.parent_id,
            self.trace_context,
        )

    def label_params(self) -> list[tuple[str, str, str, str, float]]:
        """``(job_id, caller, key, value, created_at)`` per metadata key: the job's labels."""
        j = self.job
        return [(j.id, j.caller, k, v, j.created_at) for k, v in j.metadata.items()]

    def target_params(self) -> list[tuple[str, int, str, str, str, str | None]]:
        """``(job_id, idx, url, options, status, custom_id)`` per target, all ``pending``."""
        # Once per target of every submit: the job's id and the status looked up once (an enum
        # member's .value alone cost more than the rest of a row). The text, not the member:
        # what both backends' drivers take alike (psycopg dumps a plain Enum by its name).
        job_id, pending = self.job.id, TargetState.PENDING.value
        return [
            (job_id, i, t.url, options_text(t.options), pending, t.custom_id)
            for i, t in enumerate(self.targets)
        ]

    def plain_urls(self) -> list[str] | None:
        """The targets' URLs in ``idx`` order if none has options or a custom id (their rows
        are then the URLs alone, ``pending``), else None."""
        return plain_urls(self.targets)

    def target_columns(self) -> tuple[str, str, list[str], list[str], list[str | None]]:
        """``(job_id, status, urls, options, custom_ids)``: the targets as columns, all
        ``pending``, in ``idx`` order (one multi-row insert's parameters)."""
        targets = self.targets
        return (
            self.job.id,
            TargetState.PENDING.value,
            [t.url for t in targets],
            [options_text(t.options) for t in targets],
            [t.custom_id for t in targets],
        )


def new_job(new: NewJob, *, now: float) -> JobInsert:
    """Check a create request and build the job it would insert, before any I/O.

    Invalid targets, metadata or caller names raise :class:`InvalidTargets` /
    :class:`InvalidRequest`; a terminal ``status`` or a malformed ``job_id`` or ``parent_id``
    raises ValueError. A ``webhook_url`` that is not text every store keeps (a NUL, a lone
    surrogate, a control character) raises :class:`InvalidRequest`, before any store is
    asked: its sender checks the rest.
    """
    caller = check_caller(new.caller)
    caller_class = check_caller(new.caller_class, "caller_class")
    checked = check_targets(new.targets)
    status, job_id = new.status, new.job_id
    labels = check_metadata(new.metadata)
    if new.webhook_url is not None:
        check_webhook_text(new.webhook_url)
    parent_id = new.parent_id
    if parent_id is not None and not is_job_id(parent_id):
        raise ValueError(f"{parent_id!r} is not a job id")
    state = status if type(status) is JobState else JobState(status)
    if not state.is_live:
        raise ValueError(f"a new job is queued or running, not {status}")
    if job_id is not None and not is_job_id(job_id):
        raise ValueError(f"{job_id!r} is not a job id; make one with new_job_id()")
    key = idem_key(caller, checked, labels, parent_id)
    job = Job(
        new_job_id() if job_id is None else job_id,
        state,
        None,
        len(checked),
        0,
        caller=caller,
        caller_class=caller_class,
        idem_key=key,
        created_at=now,
        updated_at=now,
        expires_at=now + new.ttl,
        metadata=labels,
        parent_id=parent_id,
    )
    return JobInsert(job, checked, check_trace_context(new.trace_context))


#: A W3C ``traceparent``: version 00, trace id, parent span id, flags (lower-case hex).
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def check_trace_context(value: str | None) -> str | None:
    """``value`` if it is None or a W3C ``traceparent`` (55 characters); else ValueError."""
    if value is None or (
        isinstance(value, str) and _TRACEPARENT.fullmatch(value) and "0" * 32 not in value
    ):
        return value
    raise ValueError(f"{str(value)[:80]!r} is not a W3C traceparent")


def check_caps(
    want: Admission,
    *,
    caller_live: Callable[[], int],
    total_live: Callable[[], int],
    blocking_job: Callable[[], str | None],
) -> None:
    """Raise the cap of ``want`` that its job would break, checked in this order:
    :class:`TooManyTargets`, :class:`CallerBusy` (the caller holds ``caller_live()`` live
    jobs; it names ``blocking_job()``, the caller's newest live job), :class:`Busy`
    (``total_live()`` in all). The counts and the blocking job are only asked for when needed."""
    if want.targets_total > want.targets_per_job:
        raise TooManyTargets(
            f"the job has {want.targets_total} targets; the limit is {want.targets_per_job} per job"
        )
    if caller_live() >= want.jobs_per_caller:
        blocking = blocking_job()
        raise CallerBusy(
            f"caller {want.caller!r} already has {want.jobs_per_caller} live job(s), the newest "
            f"{blocking}; wait for it to finish or cancel it",
            job_id=blocking,
        )
    if total_live() >= want.jobs_total:
        raise Busy(f"all {want.jobs_total} job slots are taken; retry when a job finishes")


def check_counted_caps(
    want: Admission, caller_live: int, total_live: int, newest_live: object
) -> None:
    """:func:`check_caps` with the counts and the caller's newest live job (None if none)
    already read, as an admission read gets them in one snapshot."""
    check_caps(
        want,
        caller_live=lambda: int(caller_live),
        total_live=lambda: int(total_live),
        blocking_job=lambda: None if newest_live is None else str(newest_live),
    )
