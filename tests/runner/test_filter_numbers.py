"""A :class:`JobFilter` a Python caller builds: a ``created_after`` no store can compare is
refused when the filter is made (InvalidRequest, as ``parse_filter``'s), not at the read."""

from __future__ import annotations

import math

import pytest

from trio_batch import Config, InvalidRequest, JobStore, Target, open_runner
from trio_batch.store import JobFilter

from ..support.fakes import FakeClock, ScriptedFetch


@pytest.mark.parametrize(
    "when",
    [10**400, 2**63, 1e300, math.nan, math.inf, -1, True, "0"],
    ids=["10**400", "2**63", "1e300", "nan", "inf", "-1", "True", "str"],
)
def test_a_created_after_no_store_can_compare_is_refused(when: object) -> None:
    # 10**400 and 2**63 raised OverflowError binding it in SQLite; NaN listed and cancelled
    # nothing without a word; True read as 1.
    with pytest.raises(InvalidRequest, match="created_after must be epoch seconds"):
        JobFilter(created_after=when)  # type: ignore[arg-type]


async def test_an_int_created_after_filters_as_its_float_on_every_backend(
    job_store: JobStore, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    url = "https://example.test/held"
    started, release = fetch.gate(url)
    async with open_runner(job_store, fetch, Config(), now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", [Target(url)])
        await started.wait()  # live while it is listed
        since = int(clock()) - 1
        listed = await runner.cancel_matching("alice", JobFilter(created_after=since), dry_run=True)
        assert listed == [job_id]
        latest = JobFilter(created_after=253_402_300_799)  # the year 9999
        assert await runner.cancel_matching("alice", latest, dry_run=True) == []
        release.set()
        await runner.wait(job_id)
