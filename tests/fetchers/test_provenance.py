"""Every built-in fetch result's ``meta`` says where its body came from, against the fake site."""

from __future__ import annotations

import hashlib

from trio_batch import Options, Target, __version__
from trio_batch.fetchers import HttpFetcher

from ..support.local_server import LAST_MODIFIED, VERSIONED, LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest


def _clock() -> float:
    return 1_700_000_000.5


async def test_meta_carries_validators_digest_time_and_version(server: LocalServer) -> None:
    fetcher = HttpFetcher(now=_clock)
    result = await fetcher(Target(server.url("/versioned")))
    body = f"{VERSIONED} 1".encode()
    meta = result.meta
    assert result.content == body.decode()
    assert meta["url"] == server.url("/versioned")
    assert meta["status_code"] == 200
    assert meta["content_type"] == "text/plain"
    assert meta["etag"] == '"v1"'
    assert meta["last_modified"] == LAST_MODIFIED
    assert meta["date"].endswith(" GMT")
    assert meta["bytes"] == len(body)
    assert meta["sha256"] == hashlib.sha256(body).hexdigest()
    assert meta["fetched_at"] == _clock()  # the injected clock, not the machine's
    assert meta["fetcher"] == f"trio-batch/{__version__}"
    assert "redirects" not in meta and "redirect_chain" not in meta


async def test_redirect_chain_lists_every_hop_before_the_final_url(server: LocalServer) -> None:
    second = "/redirect?to=/versioned"
    first = server.url("/redirect?to=" + second.replace("?", "%3F").replace("=", "%3D"))
    result = await HttpFetcher(now=_clock)(Target(first))
    assert result.meta["url"] == server.url("/versioned")
    assert result.meta["redirects"] == 2
    assert result.meta["redirect_chain"] == [first, server.url(second)]


async def test_digest_is_of_the_body_not_of_the_processed_text(server: LocalServer) -> None:
    fetcher = HttpFetcher(now=_clock)
    raw = await fetcher(Target(server.url("/page.html")))
    grepped = await fetcher(Target(server.url("/page.html"), Options(mode="text", grep="pears")))
    assert grepped.content != raw.content
    assert grepped.meta["sha256"] == raw.meta["sha256"]
    assert raw.meta["sha256"] == hashlib.sha256(raw.content.encode()).hexdigest()
