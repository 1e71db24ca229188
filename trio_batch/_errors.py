"""The exception tree: every error trio_batch raises on purpose, drawn in one place.

::

    BatchError
    ├── InvalidRequest           a malformed argument
    │   └── InvalidTargets       a malformed target list
    ├── TooManyTargets           over targets_per_job
    ├── ResultTooLarge           a fetch's result over max_result_size (stored as its error)
    ├── CallerBusy               the caller holds jobs_per_caller live jobs
    ├── Busy                     jobs_total live jobs in all
    ├── JobLive                  a live job cannot be forgotten
    ├── JobGone                  the job was deleted while it was read page by page
    ├── WebhookConflict          a resubmit's reused job has another webhook, or none
    ├── RunnerClosed             the runner has shut down
    └── StoreError               the database cannot be used as asked
        ├── SchemaVersionError   written by a newer trio_batch, or not ours
        ├── StoreLocked          another runner holds a one-runner database
        ├── StoreUnavailable     refused a call; nothing was changed
        └── OutcomeExists        the target already has an outcome

Front ends map these to their own codes (the HTTP service to statuses and problem documents).
"""

from __future__ import annotations

__all__ = [
    "BatchError",
    "Busy",
    "CallerBusy",
    "InvalidRequest",
    "InvalidTargets",
    "JobGone",
    "JobLive",
    "OutcomeExists",
    "ResultTooLarge",
    "RunnerClosed",
    "SchemaVersionError",
    "StoreError",
    "StoreLocked",
    "StoreUnavailable",
    "TooManyTargets",
    "WebhookConflict",
]


class BatchError(Exception):
    """Base of every error trio_batch raises on purpose.

    The HTTP service answers each with the status, kind and title that its problem table
    (``PROBLEMS`` in ``trio_batch/http/_problems.py``) gives the class or its nearest listed
    base; the "HTTP nnn" in the docstrings here says which status that is.
    """


class InvalidRequest(BatchError):
    """An argument is malformed (a caller name that is not a non-empty string, say). HTTP 422."""


class InvalidTargets(InvalidRequest):
    """The target list is malformed: empty, a non-target, a repeated target or a bad JSON shape,
    or a target the fetch function's ``check_target`` hook refused (a bad option).

    ``index`` is the position of the offending target in the submitted list, when there is one;
    ``option`` the option at fault and ``hint`` what to do about it, when the hook said.
    HTTP 422.
    """

    def __init__(
        self,
        message: str,
        *,
        index: int | None = None,
        option: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.index = index
        self.option = option
        self.hint = hint


class TooManyTargets(BatchError):
    """The job has more targets than the ``targets_per_job`` cap allows. HTTP 422."""


class ResultTooLarge(BatchError):
    """A fetch returned a result whose stored JSON (content and meta) is longer than
    ``Config.max_result_size`` characters. Not raised to a caller: the store keeps nothing of
    the result and fails its target with this error's name and message, and a hint."""


class CallerBusy(BatchError):
    """The caller already has ``jobs_per_caller`` live jobs. HTTP 429: retry once one ends.

    ``job_id`` names the caller's newest live job, the one to wait for or cancel (None if the
    backend does not say).
    """

    def __init__(self, message: str, *, job_id: str | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id


class Busy(BatchError):
    """All ``jobs_total`` job slots are taken by live jobs. HTTP 429: retry once one ends."""


class JobLive(BatchError):
    """The job is live (or still storing its in-flight target), so it cannot be forgotten.
    HTTP 409: cancel it, wait for it to end, then forget it."""


class WebhookConflict(BatchError):
    """A resubmit (the same caller, targets, metadata and parent as a job whose lease holds)
    asked for a webhook, and that job, which a reuse would return, has another webhook URL or
    none: the webhook asked for would never be told. Nothing is created. HTTP 409: resubmit
    with the job's own webhook (or none) to get that job, or set other metadata to make a new
    one.

    ``job_id`` names the job that would have been reused; ``webhook`` is its webhook URL
    (None: it has none).
    """

    def __init__(self, message: str, *, job_id: str, webhook: str | None) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.webhook = webhook


class JobGone(BatchError):
    """The job was deleted (forgotten, or its lease lapsed and it was purged) while it was
    being read page by page: what was read is not all of it. HTTP 404; a stream already
    begun is cut, never ended as if complete."""


class RunnerClosed(BatchError):
    """The runner has shut down (or is shutting down): it takes no new jobs, and once it has
    stopped it answers nothing more. HTTP 503."""


class StoreError(BatchError):
    """The database cannot be used as asked. HTTP 503."""


class SchemaVersionError(StoreError):
    """The database was written by a newer version of trio_batch (or is not ours at all)."""


class StoreLocked(StoreError):
    """Another runner (in this process or another) is already running on this database.

    Only one runner may drain a database at a time: a second one would reap the first one's
    live jobs as "restart". Read-only use of the store is unaffected.
    """


class StoreUnavailable(StoreError):
    """The database refused a read or write: locked past the busy timeout, full, or an I/O error.

    Nothing was changed by the call that raised it. It may succeed if retried later.
    """


class OutcomeExists(StoreError):
    """The target already has an outcome (or does not exist); outcomes are never overwritten.

    HTTP 409.
    """
