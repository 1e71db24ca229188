"""A short schemathesis run against the service's own ``/openapi.json``.

The service runs in a subprocess on 127.0.0.1 (``trio-batch serve``) with the test
fetch function, so nothing leaves the machine. For every operation, schemathesis generates a
bounded number of valid and invalid requests; every response must be free of server errors and
conform to the document: status code, content type, headers and body schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from ..support.http_fixtures import ALICE, start_server, stop_server

#: Generated cases per operation and generation mode: enough to hit every status, kept short.
EXAMPLES = 15
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("schema")
    proc, url = start_server(tmp, "--jobs-per-caller", "1000", "--jobs-total", "1000")
    try:
        yield url
    finally:
        stop_server(proc)


@pytest.fixture(scope="module")
def schema(server: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{server}/openapi.json")


def _labels() -> list[str]:
    # schemathesis leaves out the operation that serves the schema itself (/openapi.json).
    return [
        "POST /v1/batches",
        "GET /v1/batches",
        "GET /v1/batches/{id}",
        "DELETE /v1/batches/{id}",
        "GET /v1/batches/{id}/targets/{idx}",
        "POST /v1/batches/{id}/cancel",
        "GET /v1/batches/{id}/events",
        "POST /v1/batches/cancel",
        "GET /v1/batches/{id}/results.jsonl",
        "POST /v1/batches/{id}/retry",
        "POST /v1/batches/{id}/webhook/redeliver",
        "POST /v1/batches/{id}/pin",
        "DELETE /v1/batches/{id}/pin",
        "GET /v1/batches/{id}/snapshot.warc.gz",
        "GET /healthz",
        "GET /metrics",
    ]


def test_every_operation_is_tested(schema: schemathesis.BaseSchema) -> None:
    labels = {result.ok().label for result in schema.get_all_operations()}
    assert labels == set(_labels())


#: Operations that take no input have no invalid request to generate.
NO_INPUT = ("GET /healthz", "GET /metrics")


@pytest.mark.parametrize(
    ("label", "mode"),
    [
        (label, mode)
        for label in _labels()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if not (mode is GenerationMode.NEGATIVE and label in NO_INPUT)
    ],
)
def test_generated_requests_get_conforming_answers(
    schema: schemathesis.BaseSchema, server: str, label: str, mode: GenerationMode
) -> None:
    _run_generated(schema, server, label, mode)


def _run_generated(
    schema: schemathesis.BaseSchema, server: str, label: str, mode: GenerationMode
) -> None:
    """``EXAMPLES`` generated requests of ``mode`` to the operation ``label``, each answer
    checked against the document."""
    operation = schema.find_operation_by_label(label)
    assert operation is not None
    strategy = operation.as_strategy(generation_mode=mode)
    checks = [*CHECKS, negative_data_rejection] if mode is GenerationMode.NEGATIVE else CHECKS

    @given(data=st.data())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def run(data: st.DataObject) -> None:
        case = data.draw(strategy)
        headers = {"Authorization": f"Bearer {ALICE}"}
        case.call_and_validate(base_url=server, headers=headers, checks=checks, timeout=30)

    run()


def test_the_run_reached_past_validation(schema: schemathesis.BaseSchema, server: str) -> None:
    """Generated requests create jobs and read them, and are refused too: the generation
    reaches past validation. It makes its own (whichever worker runs it, and in whatever
    order, it reads its own server's metrics after them)."""
    import httpx

    for label in ("POST /v1/batches", "GET /v1/batches/{id}"):
        _run_generated(schema, server, label, GenerationMode.POSITIVE)
    _run_generated(schema, server, "POST /v1/batches", GenerationMode.NEGATIVE)
    text = httpx.get(f"{server}/metrics").text
    codes = {
        line.split('code="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("trio_batch_http_requests_total{") and not line.endswith(" 0.0")
    }
    assert {"201", "200", "404", "422"} <= codes, codes
