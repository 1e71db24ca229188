"""What the dashboard shows of hostile or awkward data, in a real browser (issue 26 item 7):
malformed addresses, control and bidi characters, long URLs, result sizes, ``/ui``."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import Page, expect

from ..support.local_server import TEXT, LocalServer, server
from .test_dashboard import (
    SCREENSHOTS,
    Pages,
    ServeFactory,
    browser,
    new_page,
    result,
    row,
    serve,
    sign_in,
    status,
    submit,
)

__all__ = ["browser", "new_page", "serve", "server"]  # the fixtures, imported for pytest


def finished_job(serve: ServeFactory, new_page: Pages, *urls: str) -> tuple[Page, str, str]:
    """Sign in to a fresh service, submit ``urls``, wait until the job is done: the page,
    the service's base URL and the job id."""
    base = serve()
    page = new_page()
    sign_in(page, base)
    job_id = submit(page, *urls)
    status(page).to_have_text("done")
    return page, base, job_id


def test_ui_without_the_slash_redirects_to_the_dashboard(serve: ServeFactory) -> None:
    base = serve()
    with httpx.Client(base_url=base) as client:
        r = client.get("/ui")
        assert r.status_code == 303 and r.headers["location"] == "/ui/"
        r = client.get("/ui", headers={"Host": "evil.test"})
        assert r.headers["location"] == "/ui/"  # never built from the request


def test_a_malformed_job_address_says_so_and_shows_the_list(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    page, base, job_id = finished_job(serve, new_page, server.url("/text.txt"))
    page.goto(base + "/ui/#/jobs/%E0%A4%A")  # a hash change from the job page
    expect(page.locator("#jobs-view")).to_be_visible()
    expect(page.locator("#job-view")).to_be_hidden()
    expect(page.locator("#notice")).to_contain_text("names no job")
    page.goto(base + f"/ui/#/jobs/{job_id}")  # and a good address still works after it
    status(page).to_have_text("done")
    # new_page fails the test on any uncaught script error ("URI malformed")


def test_control_and_bidi_characters_show_as_escapes(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    page, _, _ = finished_job(serve, new_page, server.url("/controls.txt"))
    for how in ("from the event stream", "from the job view"):
        content = result(page, 0)
        expect(content).to_contain_text("\\u202egnp.exe\nsecond line")
        expect(content).to_contain_text(
            "title \\x1b]0;PWNED\\x07\\x1b[2J nul\\x00 del\\x7f csi\\x9b31m"
        )
        shown = content.text_content() or ""
        assert not {"\u202e", "\x1b", "\x7f"} & set(shown), how
        page.reload()


def test_a_long_url_is_shortened_and_shown_whole_on_demand(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    long_url = server.url("/text.txt?q=" + "a" * 3000 + "&end=1")
    page, _, _ = finished_job(serve, new_page, long_url, server.url("/page.html"))
    cell = row(page, 0).locator('td[data-label="URL"]')
    short = cell.locator("summary code.url")
    expect(short).to_contain_text("…")
    assert len(short.text_content() or "") <= 120
    expect(short).to_contain_text("&end=1")  # the end of the URL, which tells URLs apart
    box = short.bounding_box()
    assert box is not None and box["height"] < 150  # a few lines, not several screens
    whole = cell.locator("code.url-whole")
    expect(whole).to_be_hidden()
    cell.locator("summary").click()
    expect(whole).to_have_text(long_url)
    expect(row(page, 1).locator("code.url")).to_have_text(server.url("/page.html"))  # short
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "long-url.png"), full_page=True)


def test_a_results_sizes_agree_closed_and_open(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    page, _, _ = finished_job(serve, new_page, server.url("/text.txt"))
    page.reload()  # from the job view: the stored size first, the content when opened
    details = row(page, 0).locator('td[data-label="Result"] > details')
    summary = details.locator("> summary")
    expect(summary).to_have_text(re.compile(r"result \(\d+ characters stored with its meta\)"))
    closed = summary.text_content()
    summary.click()
    expect(details.locator("p.note")).to_have_text(f"{len(TEXT)} characters of content:")
    assert summary.text_content() == closed  # the same count, still saying what it counts
