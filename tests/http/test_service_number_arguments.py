"""The service's own numbers (``create_app``'s and ``trio-batch serve``'s): one no request
can use is refused when the service is made, not found out at each request."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from trio_batch.http import create_app

from ..support.fakes import FakeClock, ScriptedFetch
from .test_http import AUTH, auth, running

BAD: list[tuple[str, Any]] = [
    ("max_body", math.nan),  # no comparison with NaN is true: any body let in
    ("max_body", 1.5),
    ("max_body", True),
    ("body_timeout", 10**400),  # every submit: OverflowError in trio, a 500
    ("body_timeout", math.inf),  # a trickled body never cut off
    ("heartbeat", 10**400),  # every event stream: OverflowError
    ("heartbeat", math.inf),
    ("retry_after", True),  # sent as "Retry-After: True"
    ("retry_after", 1.5),  # sent as "Retry-After: 1.5", no delay-seconds
    ("retry_after", 10**400),  # sent as a 401-digit header
]


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={str(v)[:6]}" for n, v in BAD])
def test_create_app_refuses_a_number_no_request_can_use(
    tmp_path: Path, fetch: ScriptedFetch, name: str, value: Any
) -> None:
    with pytest.raises((TypeError, ValueError), match=name) as refused:
        create_app(db=tmp_path / "jobs.db", fetch=fetch, auth=AUTH, **{name: value})
    assert len(str(refused.value)) < 300


async def test_a_body_timeout_of_a_century_still_takes_a_submit(
    tmp_path: Path, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with running(tmp_path, fetch, clock, body_timeout=100 * 365 * 86400) as svc:
        r = await svc.client.post(
            "/v1/batches", json={"targets": [{"url": "https://example.test/"}]}, headers=auth()
        )
        assert r.status_code == 201, r.text
