"""The built-in fetcher against a real HTTP server on 127.0.0.1: every option and error path."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import socket
from pathlib import Path

import pytest
import trio

from trio_batch import Options, Target, __version__
from trio_batch.fetchers import (
    ContentError,
    FetchError,
    FetchTimeout,
    HttpFetcher,
    HTTPStatusError,
    LocalFileError,
    NetworkError,
    OptionError,
    RedirectError,
    ResponseTooLarge,
    UnsupportedOption,
    URLError,
    URLRefused,
    http_fetch,
)

from ..support.local_server import DATA, HTML, PDF, TEXT, LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest


def target(url: str, **options: object) -> Target:
    return Target(url, Options(**options))  # type: ignore[arg-type]


async def fetch_error(fetcher: HttpFetcher, t: Target) -> FetchError:
    with pytest.raises(FetchError) as info:
        await fetcher(t)
    assert info.value.hint, f"{type(info.value).__name__} has no hint"
    return info.value


# --------------------------------------------------------------------------------------------
# Modes


async def test_raw_is_the_body_with_meta(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/page.html")))
    assert result.content == HTML
    meta = dict(result.meta)
    assert meta.pop("sha256") == hashlib.sha256(HTML.encode()).hexdigest()
    assert isinstance(meta.pop("fetched_at"), float)
    assert meta.pop("date")  # the server's Date header
    assert meta == {
        "url": server.url("/page.html"),
        "status_code": 200,
        "content_type": "text/html",
        "bytes": len(HTML.encode()),
        "fetcher": f"trio-batch/{__version__}",
    }
    explicit = await http_fetch(target(server.url("/page.html"), mode="raw"))
    assert explicit.content == HTML


async def test_text_mode_turns_html_into_readable_text(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/page.html"), mode="text"))
    assert result.content.splitlines() == [
        "Trio batch fixture",
        "The first paragraph mentions apples.",
        "The second paragraph mentions pears.",
        "- alpha",
        "- beta",
    ]
    assert "Trio batch fixture" in result.content
    assert "pears" in result.content
    assert "<" not in result.content
    assert "script text" not in result.content
    assert "color: red" not in result.content
    assert "Fixture page" not in result.content  # <head> is not page text


async def test_text_mode_leaves_non_html_alone(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/text.txt"), mode="text"))
    assert result.content == TEXT


async def test_charset_from_content_type(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/latin1.txt")))
    assert result.content == "café crème"


async def test_unknown_mode(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/page.html"), mode="pdf"))
    assert isinstance(err, OptionError)
    assert "'markdown'" in err.hint and "'main'" in err.hint
    assert server.count("/page.html") == 0  # options are checked before any request


async def test_binary_body_is_refused(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/image.png")))
    assert isinstance(err, ContentError)
    assert "binary" in str(err)


# --------------------------------------------------------------------------------------------
# grep


async def test_grep_keeps_matching_lines(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/text.txt"), grep=r"match$"))
    assert result.content == "line 3: match\nline 4: match\nline 9: match"
    assert result.meta["matches"] == 3


async def test_grep_context_adds_neighbours_and_separators(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/text.txt"), grep="match", context=True))
    assert result.content.splitlines() == [
        "line 2: plain",
        "line 3: match",
        "line 4: match",
        "line 5: plain",
        "--",
        "line 8: plain",
        "line 9: match",
        "line 10: plain",
    ]
    wider = HttpFetcher(context_lines=3)
    result = await wider(target(server.url("/text.txt"), grep="match", context=True))
    assert "--" not in result.content  # the groups touch at line 6
    assert result.content.splitlines()[0] == "line 1: plain"


async def test_grep_without_match_is_empty(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/text.txt"), grep="nothing like this"))
    assert result.content == ""
    assert result.meta["matches"] == 0


async def test_grep_applies_after_text_mode(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/page.html"), mode="text", grep="pears"))
    assert result.content == "The second paragraph mentions pears."


async def test_bad_grep_pattern(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/text.txt"), grep="(unclosed"))
    assert isinstance(err, OptionError)
    assert "regular expression" in str(err)


async def test_context_needs_grep(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/text.txt"), context=True))
    assert isinstance(err, OptionError)


# --------------------------------------------------------------------------------------------
# jq


async def test_jq_outputs_one_line_each(server: LocalServer) -> None:
    url = server.url("/data.json")
    assert (await http_fetch(target(url, jq=".items[].tag"))).content == "a\nb"
    assert (await http_fetch(target(url, jq=".n"))).content == "2"
    assert json.loads((await http_fetch(target(url, jq=".items[0]"))).content) == DATA["items"][0]
    compact = (await http_fetch(target(url, jq="."))).content
    assert "\n" not in compact
    assert json.loads(compact) == DATA


async def test_jq_then_grep(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/data.json"), jq=".items[] | .id", grep="2"))
    assert result.content == "2"


async def test_jq_on_a_non_json_body(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/page.html"), jq="."))
    assert isinstance(err, ContentError)
    assert "not JSON" in str(err)


async def test_jq_program_that_does_not_compile(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/data.json"), jq=".items[ | oops"))
    assert isinstance(err, OptionError)
    assert server.count("/data.json") == 0


async def test_jq_program_that_fails_at_run_time(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/data.json"), jq=".name.field"))
    assert isinstance(err, ContentError)


async def test_jq_and_text_mode_do_not_mix(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/data.json"), jq=".", mode="text"))
    assert isinstance(err, OptionError)


# --------------------------------------------------------------------------------------------
# PDF and pages


async def test_pdf_body_gives_the_text_of_every_page(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/doc.pdf")))
    assert [p.strip() for p in result.content.split("\n\n")] == [
        "First page text",
        "Second page text",
        "Third page text",
    ]
    assert result.meta["pdf_pages"] == 3
    assert result.meta["bytes"] == len(PDF)


@pytest.mark.parametrize(
    ("pages", "expected"),
    [("2", [2]), ("1,3", [1, 3]), ("2-", [2, 3]), ("1-2", [1, 2]), (" 3 , 1 ", [3, 1])],
)
async def test_pages_chooses_pages(server: LocalServer, pages: str, expected: list[int]) -> None:
    result = await http_fetch(target(server.url("/doc.pdf"), pages=pages))
    names = {1: "First", 2: "Second", 3: "Third"}
    assert [p.strip() for p in result.content.split("\n\n")] == [
        f"{names[n]} page text" for n in expected
    ]
    assert result.meta["pages"] == expected


async def test_pages_and_grep(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/doc.pdf"), pages="1-", grep="Second"))
    assert result.content.strip() == "Second page text"


@pytest.mark.parametrize("pages", ["0", "2-1", "one", "1,,2", "-3", "1" + "0" * 5000])
async def test_bad_page_ranges(server: LocalServer, pages: str) -> None:
    err = await fetch_error(http_fetch, target(server.url("/doc.pdf"), pages=pages))
    assert isinstance(err, OptionError)


async def test_pages_past_the_end(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/doc.pdf"), pages="2-4"))
    assert isinstance(err, OptionError)
    assert "3 page" in str(err)


async def test_pages_on_a_non_pdf(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/page.html"), pages="1"))
    assert isinstance(err, OptionError)
    assert "PDF" in str(err)


async def test_broken_pdf(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/broken.pdf")))
    assert isinstance(err, ContentError)


async def test_jq_on_a_pdf(server: LocalServer) -> None:
    err = await fetch_error(http_fetch, target(server.url("/doc.pdf"), jq="."))
    assert isinstance(err, ContentError)


# --------------------------------------------------------------------------------------------
# Unsupported options


@pytest.mark.parametrize("options", [{"question": "what is it?"}, {"recover": True}])
async def test_question_and_recover_are_unsupported(
    server: LocalServer, options: dict[str, object]
) -> None:
    err = await fetch_error(http_fetch, target(server.url("/page.html"), **options))
    assert isinstance(err, UnsupportedOption)
    assert next(iter(options)) in str(err)
    assert server.count("/page.html") == 0


# --------------------------------------------------------------------------------------------
# HTTP errors, redirects, limits


@pytest.mark.parametrize(("path", "code"), [("/missing", 404), ("/error", 500)])
async def test_http_error_status(server: LocalServer, path: str, code: int) -> None:
    err = await fetch_error(http_fetch, target(server.url(path)))
    assert isinstance(err, HTTPStatusError)
    assert err.status_code == code
    assert str(code) in str(err)


async def test_relative_redirect_is_followed(server: LocalServer) -> None:
    result = await http_fetch(target(server.url("/redirect?to=/data.json"), jq=".name"))
    assert result.content == "fixture"
    assert result.meta["url"] == server.url("/data.json")
    assert result.meta["redirects"] == 1


async def test_redirect_loop_stops_at_the_limit(server: LocalServer) -> None:
    err = await fetch_error(HttpFetcher(max_redirects=3), target(server.url("/loop")))
    assert isinstance(err, RedirectError)
    assert server.count("/loop") == 4  # the first request and three redirects


async def test_no_redirects_allowed(server: LocalServer) -> None:
    fetcher = HttpFetcher(max_redirects=0)
    err = await fetch_error(fetcher, target(server.url("/redirect?to=/page.html")))
    assert isinstance(err, RedirectError)
    assert server.count("/page.html") == 0


@pytest.mark.parametrize("to", ["file:///etc/passwd", "ftp://127.0.0.1/x", "javascript:alert(1)"])
async def test_redirect_to_another_scheme_is_refused(server: LocalServer, to: str) -> None:
    err = await fetch_error(http_fetch, target(server.url(f"/redirect?to={to}")))
    assert isinstance(err, RedirectError)


async def test_size_cap_from_content_length(server: LocalServer) -> None:
    fetcher = HttpFetcher(max_bytes=1000)
    assert (await fetcher(target(server.url("/big?n=1000")))).meta["bytes"] == 1000
    err = await fetch_error(fetcher, target(server.url("/big?n=1001")))
    assert isinstance(err, ResponseTooLarge)


async def test_size_cap_while_streaming(server: LocalServer) -> None:
    fetcher = HttpFetcher(max_bytes=10_000)
    assert (await fetcher(target(server.url("/big-chunked?n=10000")))).meta["bytes"] == 10_000
    err = await fetch_error(fetcher, target(server.url("/big-chunked?n=5000000")))
    assert isinstance(err, ResponseTooLarge)


async def test_timeout_covers_a_stalled_body(server: LocalServer) -> None:
    err = await fetch_error(HttpFetcher(timeout=0.3), target(server.url("/stall")))
    assert isinstance(err, FetchTimeout)


async def test_timeout_covers_a_slow_response(server: LocalServer) -> None:
    err = await fetch_error(HttpFetcher(timeout=0.3), target(server.url("/gate")))
    assert isinstance(err, FetchTimeout)


async def test_connection_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    err = await fetch_error(http_fetch, target(f"http://127.0.0.1:{port}/"))
    assert isinstance(err, NetworkError)


async def test_cancellation_is_not_swallowed(server: LocalServer) -> None:
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def cancel_when_in_flight() -> None:
                await trio.to_thread.run_sync(server.gate_entered.wait)
                scope.cancel()

            nursery.start_soon(cancel_when_in_flight)
            await http_fetch(target(server.url("/gate")))
    assert scope.cancelled_caught


# --------------------------------------------------------------------------------------------
# URLs and schemes


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/file", "gopher://x", "mailto:a@b.c"])
async def test_unsupported_scheme(url: str) -> None:
    err = await fetch_error(http_fetch, target(url))
    assert isinstance(err, URLError)
    assert "not supported" in str(err)


async def test_missing_scheme_suggests_one() -> None:
    err = await fetch_error(http_fetch, target("example.com/page"))
    assert isinstance(err, URLError)
    assert "https://example.com/page" in err.hint


@pytest.mark.parametrize("url", ["http://[::1/", "http:///no-host", "http://127.0.0.1:99999/"])
async def test_invalid_url(url: str) -> None:
    err = await fetch_error(http_fetch, target(url))
    assert isinstance(err, URLError)


@pytest.mark.parametrize(
    "host", ["ex..ample", "a" * 64 + ".test", "xn--a.test", "\u2488.test", "\u200b.test"]
)
async def test_a_host_name_no_resolver_takes_is_a_url_error(host: str) -> None:
    # An empty or over-long label raised a bare UnicodeError from the resolver's encoding, an
    # "xn--" label that is not IDNA one from the idna package: untyped, with no hint.
    err = await fetch_error(http_fetch, target(f"http://{host}/page"))
    assert isinstance(err, URLError)
    assert "has a host name no resolver takes" in str(err)
    assert "empty label" in err.hint


@pytest.mark.parametrize("to", ["http://ex..ample/", "http://xn--a.test/"])
async def test_a_redirect_to_a_host_name_no_resolver_takes_is_refused(
    server: LocalServer, to: str
) -> None:
    err = await fetch_error(http_fetch, target(server.url(f"/redirect?to={to}")))
    assert isinstance(err, RedirectError)
    assert "broken Location" in err.hint


async def test_check_url_sees_every_hop(server: LocalServer) -> None:
    seen: list[str] = []

    async def check(url: str) -> None:
        seen.append(url)

    fetcher = HttpFetcher(check_url=check)
    await fetcher(target(server.url("/redirect?to=/page.html")))
    assert seen == [server.url("/redirect?to=/page.html"), server.url("/page.html")]


async def test_check_url_can_refuse_a_redirect_hop(server: LocalServer) -> None:
    async def check(url: str) -> None:
        if url.endswith("/page.html"):
            raise URLRefused(f"{url} is off limits", hint="ask for another URL")

    err = await fetch_error(HttpFetcher(check_url=check), target(server.url("/redirect")))
    assert isinstance(err, URLRefused)
    assert server.count("/page.html") == 0


# --------------------------------------------------------------------------------------------
# file:// URLs


async def test_file_url(tmp_path: Path) -> None:
    page = tmp_path / "page one.html"
    page.write_text(HTML)
    result = await http_fetch(target(page.as_uri(), mode="text", grep="apples|pears"))
    assert result.content == (
        "The first paragraph mentions apples.\nThe second paragraph mentions pears."
    )
    meta = dict(result.meta)
    assert meta.pop("sha256") == hashlib.sha256(HTML.encode()).hexdigest()
    assert isinstance(meta.pop("fetched_at"), float)
    assert meta == {
        "fetcher": f"trio-batch/{__version__}",
        "url": page.as_uri(),
        "status_code": None,
        "content_type": "text/html",
        "bytes": len(HTML.encode()),
        "matches": 2,
    }


async def test_file_url_to_a_pdf(tmp_path: Path) -> None:
    doc = tmp_path / "doc.pdf"
    doc.write_bytes(PDF)
    result = await http_fetch(target(doc.as_uri(), pages="3"))
    assert result.content.strip() == "Third page text"


async def test_file_url_errors(tmp_path: Path) -> None:
    err = await fetch_error(http_fetch, target((tmp_path / "nope.txt").as_uri()))
    assert isinstance(err, LocalFileError)
    err = await fetch_error(http_fetch, target(tmp_path.as_uri()))
    assert isinstance(err, LocalFileError)
    err = await fetch_error(http_fetch, target("file://otherhost/etc/hosts"))
    assert isinstance(err, URLError)


@pytest.mark.parametrize("kind", ["fifo", "device"])
async def test_a_file_url_to_a_pipe_or_device_fails_at_once(tmp_path: Path, kind: str) -> None:
    """A FIFO nobody writes to used to hang a worker thread for good (issue 12, item 2)."""
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    err = await fetch_error(http_fetch, target(path.as_uri()))
    assert isinstance(err, LocalFileError)
    assert "not a regular file" in str(err)
    assert "pipe or device" in err.hint


async def test_file_size_cap(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"z" * 101)
    err = await fetch_error(HttpFetcher(max_bytes=100), target(big.as_uri()))
    assert isinstance(err, ResponseTooLarge)


async def test_file_urls_can_be_disallowed(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("hello")
    err = await fetch_error(HttpFetcher(allow_file=False), target(f.as_uri()))
    assert isinstance(err, URLError)
    assert "allow_file" in err.hint


async def test_target_urls_stay_out_of_the_log(
    server: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx logged every full URL at INFO; URLs can carry secrets (issue 12)."""
    caplog.set_level(logging.DEBUG, logger="httpx")
    url = server.url("/text.txt") + "?token=s3cr3t-in-the-query"
    await http_fetch(target(url))
    with pytest.raises(FetchError):
        await http_fetch(target(server.url("/missing/s3cr3t-in-the-path")))
    requests = [r for r in caplog.records if r.name == "httpx"]
    assert requests  # httpx still says a request was made, and to which origin
    assert all("s3cr3t" not in r.getMessage() for r in caplog.records)
    assert f"{server.base}/…" in requests[0].getMessage()


def test_fetcher_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        HttpFetcher(timeout=0)
    # Every fetch has a deadline: no infinite timeout, nor an int past any float (which
    # failed each fetch with OverflowError).
    for seconds in (math.inf, math.nan, 10**400):
        for name in ("timeout", "connect_timeout", "process_timeout"):
            with pytest.raises(ValueError, match="positive, finite"):
                HttpFetcher(**{name: seconds})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="per-host rate"):
        HttpFetcher(per_host_rate=10**400)
    with pytest.raises(ValueError, match="finite max_pause"):
        HttpFetcher(max_host_pause=10**400)
    with pytest.raises(ValueError):
        HttpFetcher(process_timeout=0)
    with pytest.raises(ValueError):
        HttpFetcher(process_memory=1024)
    with pytest.raises(ValueError):
        HttpFetcher(max_bytes=-1)
