"""The service's problem table: which status, kind and title each typed error answers with."""

from __future__ import annotations

import logging

import pytest
from starlette.exceptions import HTTPException

from trio_batch import (
    BatchError,
    Busy,
    CallerBusy,
    InvalidRequest,
    InvalidTargets,
    OutcomeExists,
    RunnerClosed,
    SchemaVersionError,
    StoreError,
    StoreLocked,
    StoreUnavailable,
    TooManyTargets,
)
from trio_batch.http._problems import PROBLEMS, problem_for, problem_for_http, problem_type


class CustomError(BatchError):
    """An error class the table does not list: it answers with BatchError's row."""


class NarrowerBusy(CallerBusy):
    """A subclass of a listed class: it answers with its base's row."""


@pytest.mark.parametrize(
    ("error", "status", "kind", "title"),
    [
        (InvalidRequest, 422, "invalid-request", "Invalid request"),
        (InvalidTargets, 422, "invalid-targets", "Invalid targets"),
        (TooManyTargets, 422, "too-many-targets", "Too many targets"),
        (CallerBusy, 429, "caller-busy", "Caller busy"),
        (NarrowerBusy, 429, "caller-busy", "Caller busy"),
        (Busy, 429, "busy", "Service busy"),
        (RunnerClosed, 503, "shutting-down", "Shutting down"),
        (StoreError, 503, "store-unavailable", "Service error"),
        (StoreLocked, 503, "store-unavailable", "Service error"),
        (StoreUnavailable, 503, "store-unavailable", "Service error"),
        (SchemaVersionError, 503, "store-unavailable", "Service error"),
        (OutcomeExists, 409, "error", "Service error"),
        (BatchError, 500, "error", "Service error"),
        (CustomError, 500, "error", "Service error"),
    ],
)
def test_each_error_class_answers_with_its_own_row_or_its_nearest_base_s(
    error: type[BatchError], status: int, kind: str, title: str
) -> None:
    assert tuple(problem_type(error)) == (status, kind, title)
    problem = problem_for(error("what happened"), retry_after=7)
    assert (problem.status, problem.kind, problem.title) == (status, kind, title)
    retry = {"Retry-After": "7"} if status in (429, 503) else {}
    assert problem.headers == retry


def test_every_listed_class_is_a_batch_error_and_kinds_are_urn_safe() -> None:
    for error, row in PROBLEMS.items():
        assert issubclass(error, BatchError)
        assert row.kind.replace("-", "").isalpha() and row.kind.islower()


def test_a_request_error_keeps_its_detail_and_target_index() -> None:
    problem = problem_for(InvalidTargets("target 3: no url", index=3), retry_after=5)
    assert problem.detail == "target 3: no url"
    assert problem.extra == {"index": 3}
    assert problem_for(InvalidTargets("empty"), retry_after=5).extra == {}


def test_a_store_failure_is_logged_and_its_detail_replaced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="trio_batch.http"):
        problem = problem_for(StoreUnavailable("disk I/O error at /secret/path"), retry_after=5)
    assert "/secret/path" not in problem.detail
    assert problem.detail == "the job store cannot be used right now; try again later"
    assert "disk I/O error at /secret/path" in caplog.text
    # Shutting down is a 503 too, but its detail is the caller's to read.
    assert problem_for(RunnerClosed("shutting down"), retry_after=5).detail == "shutting down"


@pytest.mark.parametrize(
    ("status", "kind", "title"),
    [
        (404, "not-found", "Not found"),
        (405, "method-not-allowed", "Not allowed"),
        (400, "http-error", "HTTP error"),
    ],
)
def test_starlette_errors_answer_as_problems(status: int, kind: str, title: str) -> None:
    problem = problem_for_http(HTTPException(status, "why", headers={"Allow": "GET"}))
    assert (problem.status, problem.kind, problem.title, problem.detail) == (
        status,
        kind,
        title,
        "why",
    )
    assert problem.headers == {"Allow": "GET"}
