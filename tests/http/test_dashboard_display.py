"""What the dashboard shows of hostile or awkward data, in a real browser (issue 26 item 7):
malformed addresses, control and bidi characters, long URLs, result sizes, ``/ui``."""

from __future__ import annotations

import base64
import re
import sqlite3
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from ..support.http_fixtures import ALICE
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


def test_the_webhook_line_shows_control_and_bidi_characters_as_escapes(
    serve: ServeFactory, server: LocalServer, new_page: Pages, tmp_path: Path
) -> None:
    secret = tmp_path / "webhook-secret"
    secret.write_text("whsec_" + base64.b64encode(b"k" * 32).decode() + "\n")
    base = serve("--webhook-secret-file", str(secret))
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ALICE}"}) as client:
        r = client.post(
            "/v1/batches",
            json={
                "targets": [{"url": server.url("/text.txt")}],
                "webhook": {"url": "http://127.0.0.1:9/hook"},
            },
        )
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        while client.get(f"/v1/batches/{job_id}").json()["webhook"]["state"] == "waiting":
            time.sleep(0.02)  # until the job has ended and its event is written
    # What an older version stored, or a receiver answered, written as it is; the round
    # ended and the lease dropped, so no attempt in flight writes over it.
    with sqlite3.connect(tmp_path / "jobs.db") as db:
        db.execute(
            "UPDATE outbox SET url = ?, last_answer = ?, due_at = NULL, gave_up_at = 1, "
            "lease_owner = NULL, lease_until = NULL WHERE job_id = ?",
            ("http://127.0.0.1:9/\u202egnp.exe", "HTTP 500 \u202eyrt\x1b[2J", job_id),
        )
    page = new_page()
    sign_in(page, base)
    page.goto(base + f"/ui/#/jobs/{job_id}")
    line = page.locator("#job-webhook")
    expect(line).to_contain_text("last answer: HTTP 500 \\u202eyrt\\x1b[2J")
    expect(line).to_contain_text("Webhook http://127.0.0.1:9/\\u202egnp.exe: gave up")
    shown = line.text_content() or ""
    assert "\u202e" not in shown and "\x1b" not in shown


def test_a_result_shows_its_provenance_and_whether_it_was_replayed(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    base = serve()
    page = new_page()
    sign_in(page, base)
    auth = {"Authorization": f"Bearer {ALICE}"}
    url = server.url("/versioned")
    with httpx.Client(base_url=base, headers=auth) as client:
        r = client.post("/v1/batches", json={"targets": [{"url": url}], "snapshot": True})
        assert r.status_code == 201, r.text
        recorded = r.json()["id"]
        page.goto(f"{base}/ui/#/jobs/{recorded}")
        status(page).to_have_text("done")
        result(page, 0)
        lines = row(page, 0).locator("ul.provenance > li")
        expect(lines.first).to_have_text("fetched from the network")
        expect(lines.filter(has_text="ETag")).to_have_text('ETag: "v1"')
        expect(lines.filter(has_text="final URL")).to_have_text(f"final URL {url}")
        r = client.post(
            "/v1/batches",
            json={
                "targets": [{"url": url, "options": {"grep": "page"}}],
                "replay": {"job": recorded},
            },
        )
        assert r.status_code == 201, r.text
        replayed = r.json()["id"]
    page.goto(f"{base}/ui/#/jobs/{replayed}")
    status(page).to_have_text("done")
    result(page, 0)
    lines = row(page, 0).locator("ul.provenance > li")
    expect(lines.first).to_have_text(f"replayed from the snapshot of job {recorded}, no network")
