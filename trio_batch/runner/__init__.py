"""The runner: one drain task per job in a long-lived nursery, over a :class:`~trio_batch.JobStore`.

A package, as trio's ``_core`` is, for pieces that share private state (the :class:`_Drain` of
each job): ``_runner`` (:class:`Runner`: submit, cancel, wait, the drains), ``_open``
(:func:`open_runner`: the nursery, the heartbeat, the purge), ``_attempts`` (one target's
attempts and retries), ``_drain`` (a job's drain state), ``_cluster`` (other runners' cancels,
reaps and heartbeats on a shared database), ``_check`` (the fetch function's submit-time
check of targets), ``_purge`` (lapsed jobs), ``_store_retry`` (riding out a store that is
briefly unavailable), ``_batch_ops`` (retries, exports, bulk cancels) and ``_deliveries`` (the
outbox's terminal events: ``Config.on_terminal`` and webhooks).
"""

from ._attempts import FetchFunc, current_caller, current_job
from ._batch_ops import export_line, export_targets
from ._check import CheckTarget, TargetChecked, check_each, target_checker
from ._deliveries import DeliveryAnswer, WebhookDeliverer
from ._open import open_runner, otel_tracing
from ._runner import Runner

__all__ = [
    "CheckTarget",
    "DeliveryAnswer",
    "FetchFunc",
    "Runner",
    "TargetChecked",
    "WebhookDeliverer",
    "check_each",
    "current_caller",
    "current_job",
    "export_line",
    "export_targets",
    "open_runner",
    "otel_tracing",
    "target_checker",
]
