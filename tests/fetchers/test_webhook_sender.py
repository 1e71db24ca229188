"""WebhookSender: jobs' terminal events POSTed to a real local HTTPS receiver, signed so that
the standardwebhooks library verifies them, at least once, through the SSRF policy."""

from __future__ import annotations

import base64

import pytest
import trio
import trio.testing

from trio_batch import DeliveryAnswer, InvalidRequest, JobEvent, Store, open_runner
from trio_batch.fetchers import DestinationPolicy, WebhookSender, load_webhook_secret
from trio_batch.runner._deliveries import RETRY_DELAYS

from ..support.deliveries import delivery_reaches
from ..support.fakes import FakeClock, ScriptedFetch, urls
from ..support.webhook_receiver import Receiver


def sender_for(receiver: Receiver, *, allow_private: bool = True, **kw: object) -> WebhookSender:
    return WebhookSender(
        receiver.secret,
        DestinationPolicy(allow_private=allow_private),
        ssl_context=receiver.client_context,
        **kw,  # type: ignore[arg-type]
    )


async def test_a_finished_job_is_posted_once_signed_for_the_standardwebhooks_library(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, receiver: Receiver
) -> None:
    async with open_runner(store, fetch, now=clock, webhooks=sender_for(receiver)) as runner:
        job_id, _ = await runner.submit("a", "user", urls("x", "fail"), webhook=receiver.url)
        await runner.wait(job_id)
        delivery = await delivery_reaches(runner, job_id, attempts=1)
    (got,) = receiver.received
    assert got.verified and got.answered == 204
    assert delivery is not None
    assert got.webhook_id == delivery.event_id and got.webhook_id.startswith("msg_")
    assert got.headers["content-type"] == "application/json"
    assert got.payload["type"] == "job.partial"
    assert got.payload["data"]["id"] == job_id
    assert got.payload["data"]["counts"] == {
        "total": 2,
        "succeeded": 1,
        "failed": 1,
        "unfinished": 0,
    }
    assert (delivery.attempts, delivery.last_answer) == (1, "HTTP 204")
    assert delivery.delivered_at == clock.now and delivery.url == receiver.url


async def test_a_receiver_failing_the_first_deliveries_gets_the_same_id_until_it_takes_it(
    store: Store,
    fetch: ScriptedFetch,
    clock: FakeClock,
    receiver: Receiver,
) -> None:
    receiver.fail_first = 2
    async with open_runner(store, fetch, now=clock, webhooks=sender_for(receiver)) as runner:
        job_id, _ = await runner.submit("a", "user", urls("x"), webhook=receiver.url)
        delivery = await delivery_reaches(runner, job_id, attempts=1)
        assert (delivery.state, delivery.last_answer) == ("pending", "HTTP 503")
        assert delivery.next_attempt_at == clock.now + RETRY_DELAYS[0]
        for n, delay in enumerate(RETRY_DELAYS[:2], start=2):
            clock.advance(delay)
            runner._deliveries.wake()
            delivery = await delivery_reaches(runner, job_id, attempts=n)
        assert delivery.state == "delivered"
    assert [r.answered for r in receiver.received] == [503, 503, 204]
    assert len({r.webhook_id for r in receiver.received}) == 1
    assert all(r.verified for r in receiver.received)
    assert (delivery.attempts, delivery.last_answer) == (3, "HTTP 204")


async def test_a_private_receiver_is_refused_without_allow_private_and_nothing_is_sent(
    store: Store, fetch: ScriptedFetch, clock: FakeClock, receiver: Receiver
) -> None:
    sender = sender_for(receiver, allow_private=False)
    async with open_runner(store, fetch, now=clock, webhooks=sender) as runner:
        job_id, _ = await runner.submit("a", "user", urls("x"), webhook=receiver.url)
        delivery = await delivery_reaches(runner, job_id, attempts=1)
    assert delivery.state == "pending"
    assert delivery.last_answer is not None
    assert delivery.last_answer.startswith("refused: ") and "loopback" in delivery.last_answer
    assert receiver.received == []


@pytest.mark.parametrize(
    ("url", "allow_private", "says"),
    [
        ("http://example.org/hook", False, "https://"),
        ("ftp://example.org/hook", True, "https://"),
        ("https://user:pw@example.org/hook", False, "password"),
        ("https:///hook", False, "no host"),
        ("https://example.org:99999999/", False, "malformed"),
        ("https://example.org/" + "x" * 3000, False, "characters"),
        (42, False, "string"),
    ],
)
async def test_a_webhook_that_can_never_be_delivered_is_refused_at_submit(
    store: Store,
    fetch: ScriptedFetch,
    clock: FakeClock,
    url: object,
    allow_private: bool,
    says: str,
) -> None:
    sender = WebhookSender("whsec_" + "A" * 43, DestinationPolicy(allow_private=allow_private))
    async with open_runner(store, fetch, now=clock, webhooks=sender) as runner:
        with pytest.raises(InvalidRequest, match=says):
            await runner.submit("a", "user", urls("x"), webhook=url)  # type: ignore[arg-type]
    assert store.list_jobs(now=clock.now) == []


async def test_a_runner_without_a_sender_refuses_a_webhook_at_submit(
    store: Store, fetch: ScriptedFetch, clock: FakeClock
) -> None:
    async with open_runner(store, fetch, now=clock) as runner:
        with pytest.raises(InvalidRequest, match="no webhooks"):
            await runner.submit("a", "user", urls("x"), webhook="https://example.org/")
    assert store.list_jobs(now=clock.now) == []


def event_to(url: str) -> JobEvent:
    return JobEvent("msg_x", "job.done", "j" * 22, "done", None, 1, 1, 0, 1.0, url=url)


@pytest.mark.parametrize(("code", "says"), [(302, "redirects are not followed"), (500, "500")])
async def test_a_redirect_or_an_error_answer_is_a_failed_delivery(
    receiver: Receiver, code: int, says: str
) -> None:
    receiver.answer = code
    with pytest.raises(Exception, match=says) as failed:
        await sender_for(receiver).deliver(event_to(receiver.url))
    assert type(failed.value).__name__ == "DeliveryAnswer"
    assert len(receiver.received) == 1


async def test_a_big_answer_is_not_read_past_a_few_kib(receiver: Receiver) -> None:
    receiver.answer, receiver.answer_body = 200, b"x" * (4 * 1024 * 1024)
    assert await sender_for(receiver).deliver(event_to(receiver.url)) == "HTTP 200"


async def test_a_receiver_that_does_not_answer_times_out(receiver: Receiver) -> None:
    receiver.hold.clear()
    with pytest.raises(Exception, match=r"no answer within 0\.2 s"):
        await sender_for(receiver, timeout=0.2).deliver(event_to(receiver.url))
    receiver.hold.set()


async def _deliver_with_a_stalled_body(
    receiver: Receiver, clock: trio.testing.MockClock, code: int
) -> object:
    """What ``deliver`` gives once the receiver answered ``code`` and a few bytes, then the
    attempt's whole timeout passed with the body's last byte still to come."""
    receiver.answer, receiver.answer_body = code, b"some"
    receiver.body_flows.clear()
    sender = sender_for(receiver)
    got: list[object] = []
    try:
        async with trio.open_nursery() as nursery:

            async def deliver() -> None:
                try:
                    got.append(await sender.deliver(event_to(receiver.url)))
                except DeliveryAnswer as exc:
                    got.append(exc)

            nursery.start_soon(deliver)
            assert await trio.to_thread.run_sync(receiver.body_stalled.wait, 60)
            await trio.testing.wait_all_tasks_blocked(cushion=0.1)  # the sender reads on
            clock.jump(sender.timeout + 1)
    finally:
        receiver.body_flows.set()
    return got[0]


async def test_a_2xx_whose_body_stalls_is_a_delivery(
    receiver: Receiver, mock_clock: trio.testing.MockClock
) -> None:
    # The status line said the receiver took the event; waiting for a body that never ended
    # counted it a failure ("no answer"), and the event went out again for a day.
    assert await _deliver_with_a_stalled_body(receiver, mock_clock, 200) == "HTTP 200"


async def test_a_5xx_whose_body_stalls_is_a_failure_that_says_so(
    receiver: Receiver, mock_clock: trio.testing.MockClock
) -> None:
    failed = await _deliver_with_a_stalled_body(receiver, mock_clock, 503)
    assert isinstance(failed, DeliveryAnswer) and str(failed) == "HTTP 503"


@pytest.mark.parametrize("url", ["https://ex..ample.org/", "https://xn--a.example.org/"])
async def test_an_event_to_a_host_no_resolver_takes_is_a_failed_delivery(url: str) -> None:
    # Stored before submits were checked for it: each attempt raised a bare UnicodeError.
    sender = WebhookSender("whsec_" + "A" * 43, DestinationPolicy())
    event = JobEvent("msg_1", "job.done", "A" * 22, "done", None, 1, 1, 0, 0.0, url=url)
    with pytest.raises(DeliveryAnswer, match="host name no resolver takes"):
        await sender.deliver(event)


def test_a_secret_of_exactly_16_bytes_is_taken(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "secret"
    path.write_text("whsec_" + base64.b64encode(bytes(range(16))).decode() + "\n")
    assert load_webhook_secret(path)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("secret", "whsec_"),
        ("whsec_not base64!", "not base64"),
        ("whsec_AAAA", "at least 16"),
        ("whsec_" + base64.b64encode(bytes(15)).decode(), "15 bytes; use at least 16"),
    ],
)
def test_a_bad_secret_file_is_refused_with_a_clear_message(
    tmp_path: object, text: str, says: str
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "secret"
    path.write_text(text + "\n")
    with pytest.raises(ValueError, match=says):
        load_webhook_secret(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_webhook_secret(Path(str(tmp_path)) / "missing")


@pytest.mark.parametrize("name", ["/dev/zero", "fifo", "big"])
def test_a_secret_file_is_read_bounded_and_only_if_regular(tmp_path: object, name: str) -> None:
    # It was read whole with read_text: /dev/zero grew memory for ever, a FIFO without a
    # writer blocked the start-up for ever (this test then hangs to its timeout).
    import os
    from pathlib import Path

    path = Path(name)
    if name == "fifo":
        path = Path(str(tmp_path)) / "fifo"
        os.mkfifo(path)
    elif name == "big":
        path = Path(str(tmp_path)) / "secret"
        path.write_text("whsec_" + base64.b64encode(bytes(32)).decode() + " " * 5000 + "\n")
    says = "holds more than" if name == "big" else "is not a regular file"
    with pytest.raises(ValueError, match=f"cannot read the webhook secret file .*{says}"):
        load_webhook_secret(path)


def test_a_secret_file_with_a_byte_order_mark_is_taken(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "secret"
    secret = "whsec_" + base64.b64encode(bytes(range(32))).decode()
    path.write_text("\ufeff" + secret + "\r\n", encoding="utf-8")
    assert load_webhook_secret(path) == secret
    path.write_bytes(b"whsec_\xff\n")
    with pytest.raises(ValueError, match=r"cannot read the webhook secret file .*utf-8"):
        load_webhook_secret(path)


async def test_a_host_rebound_after_the_check_is_never_connected_to(receiver: Receiver) -> None:
    # "localhost" answers a public address to the policy's check, then its real loopback one
    # (DNS rebinding). The POST goes only where a check allowed, so the receiver gets nothing.
    answers = iter([["93.184.216.34"]])

    async def rebinding(host: str, port: int) -> list[str]:
        assert host == "localhost"
        return next(answers, ["127.0.0.1"])

    sender = WebhookSender(
        receiver.secret,
        DestinationPolicy(resolver=rebinding),
        ssl_context=receiver.client_context,
    )
    url = receiver.url.replace("127.0.0.1", "localhost")
    with pytest.raises(Exception, match=r"refused: .*loopback") as failed:
        await sender.deliver(event_to(url))
    assert type(failed.value).__name__ == "DeliveryAnswer"
    assert receiver.arrivals == 0


@pytest.mark.parametrize(
    "timeout", [10**400, float("inf"), float("nan"), True], ids=["10**400", "inf", "nan", "True"]
)
def test_a_timeout_no_delivery_can_keep_is_refused_when_the_sender_is_made(
    timeout: object,
) -> None:
    # 10**400 passed "timeout > 0" and failed every delivery with OverflowError (retried
    # for a day); infinity let a receiver that never answers hold a delivery for ever.
    with pytest.raises((TypeError, ValueError), match="timeout"):
        WebhookSender("whsec_" + "A" * 43, DestinationPolicy(), timeout=timeout)  # type: ignore[arg-type]


async def test_a_sender_with_a_big_finite_timeout_still_delivers(receiver: Receiver) -> None:
    assert await sender_for(receiver, timeout=1e6).deliver(event_to(receiver.url)) == "HTTP 204"
