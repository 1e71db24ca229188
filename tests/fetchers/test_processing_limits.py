"""What processing makes of a body is bounded, and its failures are clear (issue 25, item 4).

The output is capped (``max_output``, by default ``max_bytes``); deeply nested documents and a
``RecursionError`` or ``MemoryError`` in processing fail the target with a hint.
"""

from __future__ import annotations

import pytest

from trio_batch import Config, Options, Store, Target, TargetState, open_runner
from trio_batch.fetchers import ContentError, HttpFetcher, OutputTooLarge

from ..support.fakes import FakeClock
from ..support.local_server import LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest

MIB = 1024 * 1024


async def test_a_jq_program_that_multiplies_a_small_body_fails_past_the_output_cap(
    server: LocalServer, store: Store, clock: FakeClock
) -> None:
    # The case: a 5 KB body, a jq program making 200 MB of it.
    fetcher = HttpFetcher(max_bytes=MIB, process_timeout=60)
    bomb = Target(server.url("/data.json"), Options(jq='"y" * 200000000'))
    async with open_runner(store, fetcher, Config(ttl=100), now=clock) as runner:
        job_id, _ = await runner.submit("alice", "user", [bomb])
        await runner.wait(job_id)
        found = await runner.status(job_id)
    assert found is not None
    target = found[1][0]
    assert target.status == TargetState.FAILED
    assert target.result is None  # nothing oversized stored
    assert target.error is not None and target.error.startswith("OutputTooLarge: processing")
    assert f"more than {MIB} bytes of output" in target.error
    assert target.hint is not None and "max_output" in target.hint


async def test_many_small_jq_outputs_stop_at_the_cap_not_at_the_deadline(
    server: LocalServer,
) -> None:
    # Without the cap this runs until process_timeout (600 s) kills it.
    fetcher = HttpFetcher(max_output=100_000, process_timeout=600)
    with pytest.raises(OutputTooLarge) as info:
        await fetcher(Target(server.url("/data.json"), Options(jq="range(1e12)")))
    assert "more than 100000 bytes of output" in str(info.value)


async def test_the_cap_is_in_bytes_after_decoding_a_raw_body(server: LocalServer) -> None:
    # 1000 undecodable bytes become 1000 U+FFFD: 3000 bytes of UTF-8.
    url = server.url("/generated?what=undecodable&n=1000")
    with pytest.raises(OutputTooLarge):
        await HttpFetcher(max_bytes=1000)(Target(url))
    result = await HttpFetcher(max_bytes=1000, max_output=3000)(Target(url))
    assert result.content == "\ufffd" * 1000


async def test_the_cap_applies_to_grep_and_html_too(server: LocalServer) -> None:
    page = Target(server.url("/page.html"), Options(mode="text"))
    with pytest.raises(OutputTooLarge):
        await HttpFetcher(max_output=20)(page)
    text = (await HttpFetcher()(page)).content
    assert (await HttpFetcher(max_output=len(text.encode()))(page)).content == text
    with pytest.raises(OutputTooLarge):
        await HttpFetcher(max_output=10)(Target(server.url("/text.txt"), Options(grep="line")))


@pytest.mark.parametrize("depth", [5_000, 200_000])
async def test_deep_json_fails_with_a_hint(server: LocalServer, depth: int) -> None:
    # 200,000 deep is past jq's own parsing limit; 5,000 parses, but its output is deeper
    # than Python's recursion limit.
    url = server.url(f"/generated?what=deep-json&n={depth}")
    with pytest.raises(ContentError) as info:
        await HttpFetcher()(Target(url, Options(jq=".")))
    assert "nested too deeply" in str(info.value)
    assert "RecursionError" not in str(info.value)
    assert "thousands deep" in info.value.hint


async def test_jq_on_a_body_that_is_not_json_says_so(server: LocalServer) -> None:
    for path in ("/page.html", "/generated?what=line&n=0"):
        with pytest.raises(ContentError) as info:
            await HttpFetcher()(Target(server.url(path), Options(jq=".")))
        assert "is not JSON" in str(info.value), path
        assert "serves JSON" in info.value.hint


async def test_a_memory_error_in_processing_fails_the_target_with_a_hint(
    server: LocalServer,
) -> None:
    fetcher = HttpFetcher(process_timeout=60, process_memory=64 * MIB)
    with pytest.raises(ContentError) as info:
        await fetcher(Target(server.url("/data.json"), Options(jq="[range(50000000)] | length")))
    assert "memory" in str(info.value)
    assert "too costly" in info.value.hint


async def test_starting_a_worker_does_not_count_toward_the_processing_deadline(
    server: LocalServer,
) -> None:
    # A fresh pool has no worker: starting one (a process, its libraries) takes far longer
    # than 0.2 s; the grep itself a millisecond. The deadline is for the grep alone.
    fetcher = HttpFetcher(process_timeout=0.2)
    for _ in range(2):
        result = await fetcher(Target(server.url("/text.txt"), Options(grep="match")))
        assert result.meta["matches"] == 3
