"""POST /v1/batches takes the caller's W3C traceparent; a malformed one is ignored, never an
error."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_batch import otel_tracing

from ..support.fakes import FakeClock, ScriptedFetch
from ..support.tracing import memory_provider
from .test_http import auth, body, running

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("traceparent", "linked"),
    [
        (PARENT, True),
        ("garbage", False),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),  # invalid trace id
        ("00-" + "f" * 5000, False),
    ],
)
async def test_the_job_links_to_a_valid_traceparent_only(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock, traceparent: str, linked: bool
) -> None:
    provider, exporter = memory_provider()
    async with running(tmp_path, fetch, clock, tracing=otel_tracing(provider)) as svc:
        r = await svc.client.post(
            "/v1/batches", json=body("a"), headers={**auth(), "traceparent": traceparent}
        )
        assert r.status_code == 201, r.text
        await svc.wait_done(r.json()["id"])
    [job] = [s for s in exporter.get_finished_spans() if s.name == "trio_batch.job"]
    links = [f"{link.context.trace_id:032x}" for link in job.links]
    assert links == (["4bf92f3577b34da6a3ce929d0e0e4736"] if linked else [])
