"""trio_batch: a persistent batch job runner for trio programs.

A caller submits a job, a list of distinct targets; the runner drains each job's targets one at
a time through an async fetch function the host injects, stores every outcome as soon as it
completes (SQLite by default), and answers status queries from the store.

The packages, in the one direction imports flow: the model (``_model``, ``_errors``,
``_config``), the store (``store/``: the :class:`JobStore` interface and its backends), the
runner (``runner/``), and the front ends (``cli/``, ``http/``, ``fetchers/``); an
import-linter contract in ``pyproject.toml`` holds that order.
"""

from ._config import ClassLimits, Config
from ._errors import (
    BatchError,
    Busy,
    CallerBusy,
    InvalidRequest,
    InvalidTargets,
    JobGone,
    JobLive,
    OutcomeExists,
    ResultTooLarge,
    RunnerClosed,
    SchemaVersionError,
    StoreError,
    StoreLocked,
    StoreUnavailable,
    TooManyTargets,
    WebhookConflict,
)
from ._event import Delivery, JobEvent
from ._model import (
    Job,
    JobState,
    Options,
    OutcomeWrite,
    Result,
    Target,
    TargetState,
    TargetStatus,
    idem_key,
)
from ._retry import RetryableError, RetryNotice, RetryPolicy
from ._tracing import Tracing
from ._version import __version__ as __version__
from .runner import DeliveryAnswer, FetchFunc, Runner, WebhookDeliverer, open_runner, otel_tracing
from .store import (
    SCHEMA_VERSION,
    Admission,
    JobFilter,
    JobStore,
    NewJob,
    SQLiteJobStore,
    Store,
    StoreCounts,
    open_store,
)

__all__ = [
    "SCHEMA_VERSION",
    "Admission",
    "BatchError",
    "Busy",
    "CallerBusy",
    "ClassLimits",
    "Config",
    "Delivery",
    "DeliveryAnswer",
    "FetchFunc",
    "InvalidRequest",
    "InvalidTargets",
    "Job",
    "JobEvent",
    "JobFilter",
    "JobGone",
    "JobLive",
    "JobState",
    "JobStore",
    "NewJob",
    "Options",
    "OutcomeExists",
    "OutcomeWrite",
    "Result",
    "ResultTooLarge",
    "RetryNotice",
    "RetryPolicy",
    "RetryableError",
    "Runner",
    "RunnerClosed",
    "SQLiteJobStore",
    "SchemaVersionError",
    "Store",
    "StoreCounts",
    "StoreError",
    "StoreLocked",
    "StoreUnavailable",
    "Target",
    "TargetState",
    "TargetStatus",
    "TooManyTargets",
    "Tracing",
    "WebhookConflict",
    "WebhookDeliverer",
    "idem_key",
    "open_runner",
    "open_store",
    "otel_tracing",
]
