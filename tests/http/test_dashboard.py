"""The dashboard (``/ui/``) in a real browser: headless Chromium driven by Playwright.

Each test runs ``trio-batch serve`` in a subprocess with the built-in fetcher, allowed to reach
the local fixture server (tests/local_server.py) that serves the targets, and drives Debian's
``chromium`` (never a downloaded browser). A browser that cannot start fails the tests: they
do not skip. The job page's screenshot is written to build/screenshots/ (not committed).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    expect,
    sync_playwright,
)

from ..support.cuttable_proxy import CuttableProxy
from ..support.http_fixtures import ALICE, BOB, REPO, start_server, stop_server
from ..support.local_server import PAYLOAD, LocalServer, server

__all__ = ["server"]  # the fixture, imported for pytest


CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium reaches out to Google's services, which a
# closed network refuses (and which a test has no business contacting).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO / "build" / "screenshots"
#: How long a test waits for the page to show something (ms); a guard, not a speed check.
WAIT = 20_000
expect.set_options(timeout=WAIT)

ServeFactory = Callable[..., str]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (.ci/run does)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeFactory]:
    """Start ``trio-batch serve`` (built-in fetcher, loopback allowed); returns its URL."""
    procs = []

    def start(*extra: str, caller_header: str | None = None) -> str:
        proc, url = start_server(
            tmp_path, "--allow-private", *extra, fetch=None, caller_header=caller_header
        )
        procs.append(proc)
        return url

    yield start
    for proc in procs:
        stderr = stop_server(proc)
        assert ALICE not in stderr and BOB not in stderr  # tokens are never logged


class Pages:
    """Opens pages in fresh browser contexts (each with its own session storage), collecting
    script errors and console errors; the fixture fails the test if any are left at the end."""

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        self.contexts: list[BrowserContext] = []
        self.errors: list[str] = []

    def __call__(self, **options: Any) -> Page:
        options.setdefault("viewport", {"width": 1100, "height": 760})
        context = self.browser.new_context(**options)
        self.contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(WAIT)
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        page.on("console", self._on_console)
        return page

    def _on_console(self, message: ConsoleMessage) -> None:
        # The browser logs every 4xx answer to fetch(); those are the API working.
        if message.type == "error" and "Failed to load resource" not in message.text:
            self.errors.append(f"console: {message.text}")


@pytest.fixture
def new_page(browser: Browser) -> Iterator[Pages]:
    pages = Pages(browser)
    yield pages
    for context in pages.contexts:
        context.close()
    assert pages.errors == []


def sign_in(page: Page, base: str, token: str = ALICE) -> None:
    page.goto(base + "/")
    page.fill("#token", token)
    page.press("#token", "Enter")
    expect(page.locator("#jobs-view")).to_be_visible()


def submit(page: Page, *lines: str) -> str:
    """Submit a batch through the form; returns the job id the page lands on."""
    page.fill("#targets", "\n".join(lines))
    page.click("#submit-form button")
    page.wait_for_url("**/ui/#/jobs/*")
    expect(page.locator("#job-body")).to_be_visible()
    return page.url.rsplit("/", 1)[-1]


def status(page: Page) -> Any:
    return expect(page.locator("#job-status"))


def row(page: Page, idx: int) -> Any:
    return page.locator(f'#target-rows tr[data-idx="{idx}"]')


def result(page: Page, idx: int) -> Any:
    """The finished target's result preview, opened first if it is closed: a result the page
    got from the job view is read only when opened, one from the event stream is at hand."""
    expect(row(page, idx).locator(".badge")).to_have_text("done")
    details = row(page, idx).locator('td[data-label="Result"] > details')
    if details.get_attribute("open") is None:
        details.locator("> summary").click()
    return row(page, idx).locator("pre.content")


# --------------------------------------------------------------------------------------------
# What the server sends


def test_the_dashboard_is_served_with_strict_headers(serve: ServeFactory) -> None:
    base = serve()
    with httpx.Client(base_url=base) as client:
        r = client.get("/")
        assert r.status_code == 303 and r.headers["location"] == "/ui/"
        for path, media_type in (
            ("/ui/", "text/html"),
            ("/ui/app.js", "text/javascript"),
            ("/ui/app.css", "text/css"),
            ("/ui/favicon.svg", "image/svg+xml"),
        ):
            r = client.get(path)
            assert r.status_code == 200, path
            assert r.headers["content-type"].split(";")[0] == media_type
            csp = {
                d.split()[0]: d.split()[1:]
                for d in r.headers["content-security-policy"].split("; ")
            }
            assert csp["default-src"] == ["'none'"]
            assert csp["script-src"] == ["'self'"] and csp["style-src"] == ["'self'"]
            assert csp["connect-src"] == ["'self'"]
            assert csp["frame-ancestors"] == ["'none'"]
            assert csp["require-trusted-types-for"] == ["'script'"]
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["x-frame-options"] == "DENY"
        html = client.get("/ui/").text
        # Nothing inline for the policy to have to allow, and nothing from another origin.
        assert "<style" not in html and " style=" not in html and "<script>" not in html
        assert "http://" not in html and "https://" not in html and "//" not in html
        r = client.get("/ui/secrets.txt")
        assert r.status_code == 404
        assert r.headers["content-type"] == "application/problem+json"
        assert client.get("/ui/..%2F..%2Fpyproject.toml").status_code == 404


def test_the_policy_is_live_in_the_browser(serve: ServeFactory, new_page: Pages) -> None:
    page = new_page()
    page.goto(serve() + "/ui/")
    # Trusted Types: a string assigned to innerHTML throws instead of becoming markup.
    refused = page.evaluate(
        """() => { try { document.body.innerHTML = '<b>x</b>'; return false; }
                   catch (e) { return e instanceof TypeError; } }"""
    )
    assert refused is True
    blocked = "This document requires 'TrustedHTML' assignment. The action has been blocked."
    new_page.errors.remove(f"console: {blocked}")  # the browser reported the block


# --------------------------------------------------------------------------------------------
# Signing in, submitting, following a job live


def test_sign_in_submit_and_watch_the_job_finish_live(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    base = serve()
    page = new_page()
    requests: list[tuple[str, dict[str, str]]] = []
    page.on("request", lambda req: requests.append((req.url, req.headers)))

    page.goto(base + "/")
    page.fill("#token", "not-a-token-anyone-has")
    page.press("#token", "Enter")
    expect(page.locator("#sign-in-error")).to_have_text("The service does not know that token.")
    sign_in(page, base)
    expect(page.locator("#jobs-empty")).to_be_visible()
    signed_in_at = len(requests)

    job_id = submit(
        page,
        server.url("/page.html"),
        server.url("/gate"),
        json.dumps({"url": server.url("/data.json"), "options": {"jq": ".items[].tag"}}),
        server.url("/text.txt"),
    )
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads
    expect(result(page, 0)).to_contain_text("The first paragraph mentions")
    expect(row(page, 1).locator(".badge")).to_have_text("running")
    expect(row(page, 2).locator(".badge")).to_have_text("pending")
    status(page).to_have_text("running")
    expect(page.locator("#stream-state")).to_have_text("live")
    assert server.gate_entered.wait(WAIT / 1000)

    server.gate.set()
    status(page).to_have_text("done")
    expect(page.locator("#job-counts")).to_have_text("4 done · 0 failed · 0 pending of 4")
    expect(result(page, 1)).to_have_text("released")
    expect(result(page, 2)).to_have_text("a\nb")
    expect(row(page, 3).locator(".attempts")).to_have_text("1")
    expect(page.locator("#cancel")).to_be_hidden()
    assert page.evaluate("window.__sameDocument") is True
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "job-page.png"), full_page=True)

    # The list shows the job, finished, with its progress.
    page.click("text=← All jobs")
    item = page.locator(f'#jobs li[data-job="{job_id}"]')
    expect(item.locator(".badge")).to_have_text("done")
    expect(item).to_contain_text("4 done · 0 failed · 0 pending of 4")

    # The token went only in the Authorization header: never in a URL, never as a cookie.
    api_requests = [(url, headers) for url, headers in requests[signed_in_at:] if "/v1/" in url]
    assert api_requests
    assert all(headers.get("authorization") == f"Bearer {ALICE}" for _, headers in api_requests)
    assert not any(ALICE in url for url, _ in requests)
    assert page.context.cookies() == []

    page.click("#sign-out")
    expect(page.locator("#sign-in-view")).to_be_visible()
    assert page.evaluate("Object.keys(sessionStorage)") == []
    page.goto(f"{base}/ui/#/jobs/{job_id}")  # a signed-out tab shows nothing of the job
    expect(page.locator("#sign-in-view")).to_be_visible()
    expect(page.locator("#job-view")).to_be_hidden()


def test_behind_a_gateway_that_names_the_caller_no_token_is_asked_for(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    base = serve(caller_header="X-User")
    # What the gateway does: name the signed-in user in every request it passes on.
    page = new_page(extra_http_headers={"X-User": "alice"})
    page.goto(base + "/")
    expect(page.locator("#jobs-view")).to_be_visible()
    expect(page.locator("#who")).to_have_text("signed in by the gateway")
    expect(page.locator("#sign-out")).to_be_hidden()  # the gateway signs people out
    job_id = submit(page, server.url("/text.txt"))
    status(page).to_have_text("done")
    assert page.evaluate("Object.keys(sessionStorage)") == []  # no token was needed or kept
    with httpx.Client(base_url=base) as client:
        assert client.get(f"/v1/batches/{job_id}", headers={"X-User": "alice"}).is_success
        assert client.get(f"/v1/batches/{job_id}", headers={"X-User": "bob"}).status_code == 404

    # Without the gateway's header the service knows no one: the page asks for a token.
    stranger = new_page()
    stranger.goto(base + "/")
    expect(stranger.locator("#sign-in-view")).to_be_visible()
    expect(stranger.locator("#who")).to_have_text("")


def test_cancel_a_live_job(serve: ServeFactory, server: LocalServer, new_page: Pages) -> None:
    base = serve()
    page = new_page()
    sign_in(page, base)
    job_id = submit(page, server.url("/text.txt"), server.url("/missing"), server.url("/gate"))
    assert server.gate_entered.wait(WAIT / 1000)
    expect(row(page, 1).locator(".badge")).to_have_text("failed")
    expect(row(page, 1).locator(".error")).to_contain_text("404")
    expect(row(page, 2).locator(".badge")).to_have_text("running")

    page.click("#cancel")
    status(page).to_have_text("cancelled")
    expect(page.locator("#cancel")).to_be_hidden()
    expect(row(page, 2).locator(".badge")).to_have_text("pending")
    expect(result(page, 0)).to_contain_text("line 1: plain")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "job-page-cancelled.png"), full_page=True)
    with httpx.Client(base_url=base) as client:
        job = client.get(f"/v1/batches/{job_id}", headers={"Authorization": f"Bearer {ALICE}"})
    assert job.json()["status"] == "cancelled"


def test_the_stream_resumes_with_last_event_id_after_a_drop(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    base = serve()
    with CuttableProxy(base) as proxy:
        page = new_page()
        sign_in(page, proxy.url)
        job_id = submit(
            page, server.url("/text.txt"), server.url("/gate"), server.url("/data.json")
        )
        assert server.gate_entered.wait(WAIT / 1000)
        expect(row(page, 0).locator(".badge")).to_have_text("done")
        expect(page.locator("#stream-state")).to_have_text("live")

        proxy.refusing = True
        before_cut = len(proxy.sent)
        proxy.cut()
        expect(page.locator("#stream-state")).to_contain_text("reconnecting")
        # The rest of the job finishes while the page cannot reach the service.
        server.gate.set()
        with httpx.Client(base_url=base, timeout=WAIT / 1000) as client:
            events = f"/v1/batches/{job_id}/events"
            with client.stream("GET", events, headers={"Authorization": f"Bearer {ALICE}"}) as s:
                assert "event: job" in list(s.iter_lines())
        proxy.refusing = False

        status(page).to_have_text("done")
        expect(result(page, 1)).to_have_text("released")
        expect(row(page, 2).locator(".badge")).to_have_text("done")
        expect(page.locator("#target-rows tr")).to_have_count(3)
        # It reconnected with the last target it held (idx 0), not from the start.
        reconnected = bytes(proxy.sent[before_cut:]).lower()
        assert b"get /v1/batches/" + job_id.lower().encode() + b"/events" in reconnected
        assert b"\r\nlast-event-id: 0\r\n" in reconnected


# --------------------------------------------------------------------------------------------
# Problems, isolation, untrusted content


def test_problems_are_shown_inline_with_the_offending_line(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    base = serve("--jobs-per-caller", "1")
    page = new_page()
    sign_in(page, base)
    busy_job = submit(page, server.url("/gate"))
    assert server.gate_entered.wait(WAIT / 1000)
    page.click("text=← All jobs")

    problem = page.locator("#submit-problem")
    page.fill("#targets", server.url("/text.txt"))
    page.click("#submit-form button")
    expect(problem).to_be_visible()
    expect(page.locator("#submit-problem-title")).to_have_text("Caller busy")
    expect(page.locator("#submit-problem-detail")).to_contain_text("retry after 5 s")
    expect(page.locator("#submit-problem-line")).to_be_hidden()
    assert "#/jobs/" not in page.url
    page.click("#submit-problem-job-link")  # the live job in the way
    page.wait_for_url(f"**/ui/#/jobs/{busy_job}")
    status(page).to_have_text("running")
    page.go_back()
    expect(page.locator("#jobs-view")).to_be_visible()

    page.fill("#targets", f'{server.url("/text.txt")}\n\n{{"url": 5}}\n{server.url("/a")}')
    page.click("#submit-form button")
    expect(page.locator("#submit-problem-job")).to_be_hidden()
    page.click("#submit-form button")
    expect(page.locator("#submit-problem-title")).to_have_text("Invalid targets")
    expect(page.locator("#submit-problem-lineno")).to_have_text("3")
    expect(page.locator("#submit-problem-text")).to_have_text('{"url": 5}')
    selected = page.evaluate(
        "(() => { const t = document.getElementById('targets');"
        " return t.value.slice(t.selectionStart, t.selectionEnd); })()"
    )
    assert selected == '{"url": 5}'

    page.fill("#targets", f'{server.url("/text.txt")}\n{{"url": ')
    page.click("#submit-form button")
    expect(page.locator("#submit-problem-title")).to_have_text("Not JSON")
    expect(page.locator("#submit-problem-lineno")).to_have_text("2")

    # The list follows the live job to its end without a reload; then the caller has room.
    busy = page.locator("#jobs li")
    expect(busy).to_have_count(1)
    expect(busy.locator(".badge")).to_have_text("running")
    expect(busy).to_contain_text("0 done · 0 failed · 1 pending of 1")
    server.gate.set()
    expect(busy.locator(".badge")).to_have_text("done")
    expect(busy).to_contain_text("1 done · 0 failed · 0 pending of 1")
    submit(page, server.url("/text.txt"))
    status(page).to_have_text("done")


def test_another_callers_job_is_not_visible(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    base = serve()
    secret = server.url("/text.txt?bob-only")
    with httpx.Client(base_url=base) as client:
        r = client.post(
            "/v1/batches",
            json={"targets": [{"url": secret}]},
            headers={"Authorization": f"Bearer {BOB}"},
        )
    assert r.status_code == 201
    bobs_job = r.json()["id"]

    bob = new_page()
    sign_in(bob, base, BOB)
    bob.goto(f"{base}/ui/#/jobs/{bobs_job}")
    expect(row(bob, 0).locator("code.url")).to_have_text(secret)  # the job is real

    alice = new_page()
    sign_in(alice, base)
    alice.goto(f"{base}/ui/#/jobs/{bobs_job}")
    expect(alice.locator("#job-missing")).to_have_text(
        "No such job: unknown, lapsed, or not yours."
    )
    expect(alice.locator("#job-body")).to_be_hidden()
    assert "bob-only" not in alice.content()
    alice.click("text=← All jobs")
    expect(alice.locator("#jobs-empty")).to_be_visible()
    expect(alice.locator("#jobs li")).to_have_count(0)
    bob.click("text=← All jobs")
    expect(bob.locator("#jobs li")).to_have_count(1)
    expect(bob.locator(f'#jobs li[data-job="{bobs_job}"]')).to_be_visible()


def test_results_are_shown_as_text_and_never_run(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    base = serve()
    page = new_page()
    sign_in(page, base)
    hostile_url = server.url("/payload.txt?q=<img src=x onerror=window.__pwned='url'>")
    # Behind a held target, so the payloads reach the page through the event stream.
    submit(page, server.url("/gate"), server.url("/payload.txt"), hostile_url)
    expect(page.locator("#stream-state")).to_have_text("live")
    assert server.gate_entered.wait(WAIT / 1000)
    server.gate.set()
    status(page).to_have_text("done")
    rendered = page.locator("#target-rows script, #target-rows img, #target-rows svg")
    for how in ("from the event stream", "from the job view and each target's result_url"):
        expect(result(page, 1)).to_have_text(PAYLOAD)
        expect(row(page, 2).locator("code.url")).to_have_text(hostile_url)
        result(page, 2)
        expect(row(page, 2).locator("pre.meta")).to_contain_text("onerror")
        expect(rendered).to_have_count(0)
        assert page.evaluate("window.__pwned") is None, how
        page.reload()


def test_the_list_pages_through_jobs_and_a_finished_job_can_be_forgotten(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    base = serve()
    bearer = {"Authorization": f"Bearer {ALICE}"}
    with httpx.Client(base_url=base, headers=bearer, timeout=WAIT / 1000) as client:
        ids = []
        for i in range(21):  # one more than a page
            r = client.post(
                "/v1/batches", json={"targets": [{"url": server.url(f"/text.txt?{i}")}]}
            )
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
            with client.stream("GET", f"/v1/batches/{ids[-1]}/events") as events:
                assert "event: job" in list(events.iter_lines())  # finished
    page = new_page()
    sign_in(page, base)
    items = page.locator("#jobs li")
    expect(items).to_have_count(20)
    expect(items.first).to_have_attribute("data-job", ids[-1])  # newest first
    page.click("#jobs-more")
    expect(items).to_have_count(21)
    expect(items.last).to_have_attribute("data-job", ids[0])
    expect(page.locator("#jobs-more")).to_be_hidden()

    page.click(f'#jobs li[data-job="{ids[0]}"] a')
    status(page).to_have_text("done")
    expect(page.locator("#cancel")).to_be_hidden()
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("#forget")  # asked to confirm, and declined: nothing happens
    expect(page.locator("#job-body")).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#forget")
    expect(page.locator("#notice")).to_have_text(f"Job {ids[0]} is forgotten.")
    expect(page.locator("#jobs-view")).to_be_visible()
    expect(items).to_have_count(20)
    expect(page.locator(f'#jobs li[data-job="{ids[0]}"]')).to_have_count(0)
    with httpx.Client(base_url=base, headers=bearer) as client:
        assert client.get(f"/v1/batches/{ids[0]}").status_code == 404
        assert client.get(f"/v1/batches/{ids[1]}").status_code == 200


def test_a_live_job_offers_cancel_not_forget(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    page = new_page()
    sign_in(page, serve())
    submit(page, server.url("/gate"))
    status(page).to_have_text("running")
    expect(page.locator("#cancel")).to_be_visible()
    expect(page.locator("#forget")).to_be_hidden()
    server.gate.set()
    status(page).to_have_text("done")
    expect(page.locator("#forget")).to_be_visible()
    expect(page.locator("#cancel")).to_be_hidden()


# --------------------------------------------------------------------------------------------
# Phone width, keyboard, dark mode


def test_keyboard_only_at_phone_width_in_dark_mode(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    base = serve()
    page = new_page(viewport={"width": 375, "height": 740}, color_scheme="dark")
    page.goto(base + "/")
    # Focused once the page knows no gateway names the caller (its probe answers 401).
    expect(page.locator("#token")).to_be_focused()
    page.keyboard.type(ALICE)
    page.keyboard.press("Enter")
    expect(page.locator("#jobs-view")).to_be_visible()
    for _ in range(10):
        if page.evaluate("document.activeElement.id") == "targets":
            break
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "targets"
    page.keyboard.type(server.url("/text.txt"))
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Submit"
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/#/jobs/*")
    status(page).to_have_text("done")
    # Nothing wider than the screen: no sideways scrolling on a phone; and the target's row is
    # a card whose cells use the width (not a squeezed table column).
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    url_box = row(page, 0).locator("code.url").bounding_box()
    assert url_box is not None and url_box["width"] > 200
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "job-page-phone-dark.png"), full_page=True)
    dark = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    assert dark == "rgb(21, 23, 26)"

    light = new_page(viewport={"width": 375, "height": 740}, color_scheme="light")
    light.goto(base + "/ui/")
    assert light.evaluate("getComputedStyle(document.documentElement).backgroundColor") == (
        "rgb(247, 247, 245)"
    )


# --------------------------------------------------------------------------------------------
# Metadata, filters, retry


def test_jobs_are_filtered_by_label_and_a_failed_target_is_retried(
    serve: ServeFactory, server: LocalServer, new_page: Pages
) -> None:
    base = serve()
    bearer = {"Authorization": f"Bearer {ALICE}"}
    with httpx.Client(base_url=base, headers=bearer, timeout=WAIT / 1000) as client:
        ids = {}
        for run, path in (("nightly", "/missing"), ("adhoc", "/text.txt")):
            targets = [{"url": server.url("/text.txt?x"), "custom_id": "a"}]
            targets.append({"url": server.url(path), "custom_id": "b"})
            r = client.post("/v1/batches", json={"targets": targets, "metadata": {"run": run}})
            assert r.status_code == 201, r.text
            ids[run] = r.json()["id"]
            with client.stream("GET", f"/v1/batches/{ids[run]}/events") as events:
                assert "event: job" in list(events.iter_lines())  # finished
    page = new_page()
    sign_in(page, base)
    items = page.locator("#jobs li")
    expect(items).to_have_count(2)
    page.fill("#filter-label", "run:nightly")
    page.click("#filter-form button")
    expect(items).to_have_count(1)
    expect(items.first).to_have_attribute("data-job", ids["nightly"])
    expect(items.first.locator(".labels")).to_have_text("run=nightly")
    page.fill("#filter-label", "novalue")
    page.click("#filter-form button")
    expect(page.locator("#filter-problem")).to_contain_text("key:value")

    page.goto(f"{base}/ui/#/jobs/{ids['adhoc']}")
    status(page).to_have_text("done")
    expect(page.locator("#retry")).to_be_hidden()  # nothing failed
    page.goto(f"{base}/ui/#/jobs/{ids['nightly']}")
    status(page).to_have_text("partial")
    expect(page.locator("#job-meta")).to_have_text("run=nightly")
    page.click("#retry")
    page.wait_for_url("**/ui/#/jobs/*")
    expect(page.locator("#job-meta")).to_contain_text(f"retry of {ids['nightly']}")
    child = page.url.rsplit("/", 1)[-1]
    assert child != ids["nightly"]
    with httpx.Client(base_url=base, headers=bearer) as client:
        job = client.get(f"/v1/batches/{child}").json()
    assert job["parent_id"] == ids["nightly"] and job["metadata"] == {"run": "nightly"}
    assert [t["custom_id"] for t in job["targets"]] == ["b"]
