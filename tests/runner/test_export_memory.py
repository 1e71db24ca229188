"""An export of a 100,000-target job holds one page in memory, not the job: its peak of
traced allocations stays under a fixed bound far below the size of what it writes."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from trio_batch import OutcomeWrite, Result, Store, Target, open_store
from trio_batch.runner import export_line, export_targets
from trio_batch.store import NewJob

from ..support.fakes import T0
from ..support.figures import Figures

# exports 100,000 targets to check the memory bound: left out of make test-fast.
pytestmark = pytest.mark.slow

TARGETS = 100_000
#: What the export may hold at its peak: a page of 64 targets is about 64 * 500 bytes of rows,
#: decoded twice over; the whole export is about 40 MB.
BOUND = 4 * 1024 * 1024


def _big_job(path: Path) -> str:
    targets = [Target(f"https://example.test/{i}", custom_id=f"row-{i}") for i in range(TARGETS)]
    with Store.open(path) as store:
        new = NewJob(
            "alice",
            "user",
            targets,
            ttl=3600,
            targets_per_job=TARGETS,
            jobs_per_caller=1,
            jobs_total=1,
        )
        job, _ = store.create_job(new, now=T0)
        for start in range(0, TARGETS, 2000):
            writes = [
                OutcomeWrite(job.id, i, result=Result("x" * 300, {"i": i}))
                if i % 7
                else OutcomeWrite(job.id, i, error="Boom: no", hint="try again")
                for i in range(start, start + 2000)
            ]
            store.record_outcomes(writes, ttl=3600, now=T0)
    return job.id


async def test_an_export_of_100000_targets_stays_under_a_fixed_memory_bound(
    tmp_path: Path, figures: Figures
) -> None:
    path = tmp_path / "big.db"
    job_id = _big_job(path)
    store = open_store(str(path))
    try:
        job = await store.get_job(job_id, now=T0)
        assert job is not None and job.is_terminal
        written = lines = 0
        last = -1
        tracemalloc.start()
        try:
            async for jid, target in export_targets(store, job, now=T0):
                text = json.dumps(export_line(jid, target, merged=False))
                written += len(text) + 1
                assert target.idx == last + 1
                last = target.idx
                lines += 1
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        await store.aclose()
    assert lines == TARGETS
    assert written > 8 * BOUND
    assert peak < BOUND, f"peak {peak} bytes while exporting {written} bytes"
    figures.add(f"export of {TARGETS} targets: {written} bytes written, traced peak {peak} bytes")
