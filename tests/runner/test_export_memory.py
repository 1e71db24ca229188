"""An export of a 100,000-target job holds one page in memory, not the job: its peak of
traced allocations stays under a fixed bound far below the size of what it writes. A page is
bounded by its results' size too, and a retry's selection reads no result at all."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from trio_batch import OutcomeWrite, Result, Store, Target, open_store
from trio_batch.runner import export_line, export_targets
from trio_batch.runner._batch_ops import EXPORT_PAGE_BYTES, retry_targets
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


#: Big results: 24 of 1 MiB each, so that one page of 64 would be the whole 24 MiB.
BIG = 1024 * 1024


def _job_of_big_results(path: Path) -> str:
    targets = [Target(f"https://example.test/{i}") for i in range(25)]
    with Store.open(path) as store:
        new = NewJob(
            "alice", "user", targets, ttl=3600, targets_per_job=25, jobs_per_caller=1, jobs_total=1
        )
        job, _ = store.create_job(new, now=T0)
        writes = [OutcomeWrite(job.id, i, result=Result(chr(97 + i) * BIG)) for i in range(24)]
        writes.append(OutcomeWrite(job.id, 24, error="Boom: no", hint="try again"))
        store.record_outcomes(writes, ttl=3600, now=T0)
    return job.id


async def test_an_export_of_big_results_holds_a_few_mib_not_a_page_of_64(
    tmp_path: Path, figures: Figures
) -> None:
    path = tmp_path / "big-results.db"
    job_id = _job_of_big_results(path)
    store = open_store(str(path))
    try:
        job = await store.get_job(job_id, now=T0)
        assert job is not None
        seen = []
        tracemalloc.start()
        try:
            async for _, target in export_targets(store, job, now=T0):
                content = None if target.result is None else target.result.content
                seen.append((target.idx, None if content is None else (content[0], len(content))))
                del target, content
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        await store.aclose()
    assert seen == [(i, (chr(97 + i), BIG)) for i in range(24)] + [(24, None)]
    # A page of EXPORT_PAGE_BYTES and the row past it, decoded: well under the 24 MiB job.
    assert peak < 3 * (EXPORT_PAGE_BYTES + BIG), f"peak {peak} bytes"
    figures.add(f"export of 24 MiB of results: traced peak {peak} bytes")


async def test_a_retrys_selection_loads_no_result(tmp_path: Path) -> None:
    path = tmp_path / "big-results.db"
    job_id = _job_of_big_results(path)
    store = open_store(str(path))
    try:
        job = await store.get_job(job_id, now=T0)
        assert job is not None
        tracemalloc.start()
        try:
            picked = await retry_targets(store, job, frozenset({"failed"}), now=T0, limit=100)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        await store.aclose()
    assert [t.url for t in picked] == ["https://example.test/24"]
    assert peak < BIG, f"peak {peak} bytes"
