"""Sending a job's terminal event to its webhook: :class:`WebhookSender`, signed per the
Standard Webhooks spec.

Each request is a ``POST`` of the event's JSON with the ``webhook-id`` (the event's id, the same
for every attempt), ``webhook-timestamp`` (the attempt's time, Unix seconds) and
``webhook-signature`` (``v1,`` and the base64 HMAC-SHA256 of ``id.timestamp.body`` under the
secret) headers, signed by the ``standardwebhooks`` library, so a receiver verifies it with
that library's ``Webhook(secret).verify(body, headers)``. The destination goes through the
service's SSRF policy before every attempt; redirects are not followed; the answer's status
decides, and its body is read to at most :data:`MAX_ANSWER_BODY` bytes (within the attempt's
timeout) and otherwise ignored.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import trio
from standardwebhooks import Webhook

from .._errors import InvalidRequest
from .._event import JobEvent
from .._files import read_bounded
from .._targets import check_webhook_text
from .._text import check_seconds
from .._version import __version__
from ..runner import DeliveryAnswer
from ._errors import DestinationRefused
from ._pool import pinned_transport
from ._ssrf import DestinationPolicy
from ._urls import HOST_HINT, host_problem

__all__ = ["MAX_ANSWER_BODY", "WebhookSender", "load_webhook_secret"]

#: Most bytes of a receiver's answer read (then the connection is closed).
MAX_ANSWER_BODY = 4096
_SECRET_PREFIX = "whsec_"
#: Largest webhook secret file read (bytes): a secret is one short line.
MAX_SECRET_FILE = 4096


def load_webhook_secret(path: str | Path) -> str:
    """The Standard Webhooks secret in the file at ``path`` (``whsec_`` and base64, one line).

    Raises ValueError with a message for a person if it is missing or malformed.
    """
    try:
        # Bounded, and never /dev/zero or a FIFO (read for ever); a byte-order mark an
        # editor left is not part of the secret.
        data = read_bounded(path, MAX_SECRET_FILE)
        text = data.decode("utf-8").removeprefix("\ufeff").strip()
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"cannot read the webhook secret file {str(path)!r}: {exc}") from None
    check_secret(text, where=f"the webhook secret file {str(path)!r}")
    return text


def check_secret(secret: str, *, where: str = "the webhook secret") -> None:
    """Raise ValueError unless ``secret`` is ``whsec_`` and the base64 of at least 16 bytes."""
    if not secret.startswith(_SECRET_PREFIX):
        raise ValueError(
            f"{where} must hold a Standard Webhooks secret: 'whsec_' and base64, e.g. "
            "whsec_$(head -c 32 /dev/urandom | base64)"
        )
    encoded = secret[len(_SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except ValueError:
        raise ValueError(f"{where}: the part after 'whsec_' is not base64") from None
    if len(key) < 16:
        raise ValueError(f"{where}: the secret is {len(key)} bytes; use at least 16 (32 is usual)")


class WebhookSender:
    """The :class:`~trio_batch.WebhookDeliverer` of ``trio-batch serve``.

    - ``secret``: the Standard Webhooks secret (``whsec_…``) every event is signed with.
    - ``policy``: the SSRF policy (:class:`DestinationPolicy`) each attempt's URL passes first;
      without ``allow_private`` a plain ``http://`` URL is refused at submit as well.
    - ``timeout``: seconds an attempt may take, connecting and answering together.
    - ``ssl_context``: the TLS trust (default: certifi's CAs, as the fetcher's).
    - ``now``: the clock of the ``webhook-timestamp`` header (receivers compare it with theirs).

    Cancellation: an attempt cut off simply stops; the runner records nothing and the event
    goes out again later.
    """

    def __init__(
        self,
        secret: str,
        policy: DestinationPolicy,
        *,
        timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        now: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        check_secret(secret)
        # Every delivery has a deadline: an infinite timeout never cut a silent receiver, and
        # one of 10**400 failed every delivery with OverflowError.
        check_seconds("timeout", timeout, zero=False)
        self._signer = Webhook(secret)
        self.policy = policy
        self.timeout = timeout
        self._given_context = ssl_context
        self._now = now
        self._transport = transport

    def __repr__(self) -> str:
        return f"WebhookSender(policy={self.policy!r}, timeout={self.timeout!r})"

    def check_url(self, url: object) -> str:
        """The webhook URL of a submit, checked before the job exists; raises
        :class:`~trio_batch.InvalidRequest` for one never deliverable to."""
        url = check_webhook_text(url)
        try:
            parts = urlsplit(url)
            host = parts.hostname
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError as exc:
            raise InvalidRequest(f"the webhook URL {url!r} is malformed: {exc}") from None
        scheme = parts.scheme.lower()
        allowed = ("https", "http") if self.policy.allow_private else ("https",)
        if scheme not in allowed:
            raise InvalidRequest(
                f"the webhook URL must be https:// (not {scheme or 'without a scheme'}): {url}"
                + ("" if scheme != "http" else "; plain http is allowed with --allow-private")
            )
        if not host:
            raise InvalidRequest(f"the webhook URL {url!r} names no host")
        if parts.username is not None or parts.password is not None:
            raise InvalidRequest("the webhook URL must not carry a user name or password")
        problem = host_problem(url)
        if problem is not None:  # else every attempt failed with a bare UnicodeError
            raise InvalidRequest(
                f"the webhook URL {url!r} has a host name no resolver takes: {problem}; "
                + HOST_HINT
            )
        return url

    async def deliver(self, event: JobEvent) -> str:
        """POST ``event`` to ``event.url`` once; ``"HTTP 2xx"`` if the receiver took it, else
        raises :class:`~trio_batch.DeliveryAnswer` saying what happened. With
        ``event.trace_context``, the request carries it as ``traceparent`` (outside the signed
        content: the signature covers the id, the timestamp and the body)."""
        if event.url is None:
            raise DeliveryAnswer("the event has no webhook URL")
        problem = host_problem(event.url)  # one stored before submits were checked for it
        if problem is not None:
            raise DeliveryAnswer(f"refused: a host name no resolver takes: {problem}")
        try:
            await self.policy(event.url)
        except DestinationRefused as exc:
            raise DeliveryAnswer(f"refused: {exc}") from None
        body = json.dumps(event.payload(), separators=(",", ":"), ensure_ascii=False)
        now = self._now()
        headers = {
            "content-type": "application/json",
            "user-agent": f"trio-batch/{__version__}",
            "webhook-id": event.id,
            "webhook-timestamp": str(int(now)),
            "webhook-signature": self._signer.sign(
                event.id, datetime.datetime.fromtimestamp(int(now), tz=datetime.UTC), body
            ),
        }
        if event.trace_context is not None:
            headers["traceparent"] = event.trace_context
        # The status line is the answer: a body that stalls or breaks after it changes
        # nothing (a 2xx counted as a failure went out again for a day).
        answered: list[int] = []
        with trio.move_on_after(self.timeout):
            try:
                await self._post(event.url, body.encode("utf-8"), headers, answered)
            except httpx.HTTPError as exc:
                if not answered:
                    raise DeliveryAnswer(f"{type(exc).__name__}: {exc}") from None
            except DestinationRefused as exc:  # the connection's own check: the name changed
                raise DeliveryAnswer(f"refused: {exc}") from None
        if not answered:
            raise DeliveryAnswer(f"no answer within {self.timeout:g} s")
        status = answered[0]
        if 200 <= status < 300:
            return f"HTTP {status}"
        if 300 <= status < 400:
            raise DeliveryAnswer(f"HTTP {status} (redirects are not followed)")
        raise DeliveryAnswer(f"HTTP {status}")

    async def _post(
        self, url: str, body: bytes, headers: dict[str, str], answered: list[int]
    ) -> None:
        """Send one request; put its status in ``answered`` as soon as it arrives, then read
        at most :data:`MAX_ANSWER_BODY` bytes of the body."""
        # Connected only to an address the policy checked: a DNS answer that changes after the
        # check (rebinding) cannot turn a signed POST onto loopback or the private network.
        transport = self._transport or pinned_transport(self.policy, self._ssl_context)
        async with (
            httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout),
                follow_redirects=False,
                transport=transport,
                trust_env=False,
            ) as client,
            client.stream("POST", url, content=body, headers=headers) as response,
        ):
            answered.append(response.status_code)
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read >= MAX_ANSWER_BODY:
                    break  # the rest is ignored; closing the stream drops the connection

    @functools.cached_property
    def _ssl_context(self) -> ssl.SSLContext:
        if self._given_context is not None:
            return self._given_context
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
