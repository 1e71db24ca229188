"""A submit's checks and the request it makes, for :class:`~trio_batch.Runner`.

Both run before anything of the job is stored. The checks raise what
:meth:`~trio_batch.Runner.submit` says, and build nothing for the job. After a reuse,
:func:`check_reused_webhook` checks that the reused job tells the webhook asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._config import Config
from .._errors import InvalidRequest, WebhookConflict
from .._model import (
    Job,
    JobState,
    Target,
    check_caller,
    check_metadata,
    check_targets,
    idem_key,
    is_job_id,
    new_job_id,
)
from .._text import safe_text
from .._tracing import Tracing
from ..store import Admission, JobStore, NewJob
from ._check import CheckTarget, check_each
from ._deliveries import WebhookDeliverer
from ._drain import _Drain

__all__ = ["SubmitChecks", "check_reused_webhook", "job_webhook"]


class SubmitChecks:
    """A submit's checks and its job's request, made from the runner's config, its tracing,
    its webhook sender and the fetch function's target check."""

    def __init__(
        self,
        config: Config,
        tracing: Tracing,
        webhooks: WebhookDeliverer | None,
        check_target: CheckTarget | None,
    ) -> None:
        self._config = config
        self._tracing = tracing
        self._webhooks = webhooks
        self._check_target = check_target

    def check(
        self,
        caller: str,
        caller_class: str,
        targets: Sequence[Target],
        metadata: Mapping[str, str] | None,
        parent_id: str | None,
        webhook: str | None,
    ) -> tuple[Admission, str, tuple[Target, ...], dict[str, str], str | None]:
        """Check a submit's arguments (raising what :meth:`submit` says): what its job is
        admitted on, and the checked class, targets, metadata and webhook. Nothing is built
        for the job yet."""
        caller = check_caller(caller)
        caller_class = check_caller(caller_class, "caller_class")
        checked = check_targets(targets)
        labels = check_metadata(metadata)
        if parent_id is not None and not is_job_id(parent_id):
            raise InvalidRequest(f"parent_id {safe_text(parent_id, 80)!r} is not a job id")
        if self._check_target is not None:
            check_each(self._check_target, checked)
        if webhook is not None:
            if self._webhooks is None:
                raise InvalidRequest("this runner sends no webhooks (none was configured)")
            webhook = self._webhooks.check_url(webhook)
        config = self._config
        targets_per_job, jobs_per_caller = config.limits_for(caller_class)
        want = Admission(
            caller,
            idem_key(caller, checked, labels, parent_id),
            len(checked),
            targets_per_job,
            jobs_per_caller,
            config.jobs_total,
        )
        return want, caller_class, checked, labels, webhook

    def request(
        self,
        want: Admission,
        caller_class: str,
        checked: tuple[Target, ...],
        labels: dict[str, str],
        parent_id: str | None,
        webhook: str | None,
    ) -> tuple[_Drain, NewJob]:
        """The drain and store request of a checked submit; nothing is registered or stored
        yet."""
        drain = _Drain(new_job_id(), want.caller, checked)
        # Started before the job exists, so the job is stored with its span's context; a span
        # whose job is not created (a reuse, a cap) is dropped unended: never exported.
        if self._tracing.enabled:
            drain.span = self._tracing.job_started(drain.job_id, caller_class, len(checked))
        request = NewJob(
            want.caller,
            caller_class,
            checked,
            ttl=self._config.ttl,
            targets_per_job=want.targets_per_job,
            jobs_per_caller=want.jobs_per_caller,
            jobs_total=want.jobs_total,
            status=JobState.RUNNING,
            job_id=drain.job_id,
            metadata=labels,
            parent_id=parent_id,
            webhook_url=webhook,
            callback=self._config.on_terminal is not None,
            trace_context=self._tracing.trace_context(drain.span),
        )
        return drain, request


async def job_webhook(store: JobStore, job_id: str, *, now: float) -> str | None:
    """The webhook URL the job was submitted with, or None (none, or an unknown job)."""
    delivery = await store.get_delivery(job_id, now=now)
    return None if delivery is None else delivery.url


async def check_reused_webhook(store: JobStore, job: Job, webhook: str, *, now: float) -> None:
    """Raise :class:`WebhookConflict` if the reused ``job`` has another webhook than the
    (checked) ``webhook`` its resubmit asked for, or none: a reuse never drops one without a
    sign. A job's webhook is written with the job and never changes, so what is read here is
    what it was reused with."""
    stored = await job_webhook(store, job.id, now=now)
    if stored == webhook:
        return
    if stored is None and await store.get_job(job.id, now=now) is None:
        return  # forgotten or lapsed since it was reused: answered as a reuse of it is
    told = "no webhook" if stored is None else "another webhook URL"
    raise WebhookConflict(
        f"these targets were already submitted as job {job.id}, which has {told}; "
        "resubmit with the same webhook (or none) to get that job, or set other metadata "
        "to make a new job",
        job_id=job.id,
        webhook=stored,
    )
