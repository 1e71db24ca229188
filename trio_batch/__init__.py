"""trio_batch: a persistent batch job runner for trio programs, backed by SQLite.

A caller submits a job, a list of distinct targets; the runner drains each job's targets one at
a time through an async fetch function the host injects, stores every outcome in SQLite as soon
as it completes, and answers status queries from the store.
"""

from ._model import (
    BatchError,
    Busy,
    CallerBusy,
    ClassLimits,
    Config,
    InvalidRequest,
    InvalidTargets,
    Job,
    JobState,
    Options,
    Result,
    RunnerClosed,
    SchemaVersionError,
    StoreError,
    StoreLocked,
    StoreUnavailable,
    Target,
    TargetState,
    TargetStatus,
    TooManyTargets,
    idem_key,
)
from ._runner import FetchFunc, Runner, open_runner
from ._store import SCHEMA_VERSION, OutcomeExists, OutcomeWrite, Store

__all__ = [
    "SCHEMA_VERSION",
    "BatchError",
    "Busy",
    "CallerBusy",
    "ClassLimits",
    "Config",
    "FetchFunc",
    "InvalidRequest",
    "InvalidTargets",
    "Job",
    "JobState",
    "Options",
    "OutcomeExists",
    "OutcomeWrite",
    "Result",
    "Runner",
    "RunnerClosed",
    "SchemaVersionError",
    "Store",
    "StoreError",
    "StoreLocked",
    "StoreUnavailable",
    "Target",
    "TargetState",
    "TargetStatus",
    "TooManyTargets",
    "idem_key",
    "open_runner",
]

__version__ = "0.1.0"
