"""A fetcher's connections: one pooled client per trio run, pinned to checked addresses.

:class:`Pools` keeps, for each trio run that entered the fetcher (``async with fetcher:``, which
``open_runner`` does), one client whose keep-alive connections every job of that run shares,
and the run's :class:`~trio_batch.fetchers._hosts.Hosts` (per-host limits). A call made outside
any entered block gets a client of its own, closed when the call ends.

When the fetcher's ``check_url`` is a :class:`DestinationPolicy`, its connections go through
:class:`PinnedBackend`: each new connection resolves its host through the policy and connects
only to an address the policy has just allowed, so a DNS answer that changes after the check
(DNS rebinding) never reaches a forbidden address, and a pooled connection always leads to an
address that was allowed when it was opened. Requests are checked before they are sent, so a
destination the policy now refuses never gets a pooled connection either.

httpx's own log lines are cut to the URL's origin here (:class:`_URLsToOrigins`).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpcore
import httpx
import trio

from ..store import HostLimits
from ._hosts import Hosts, Politeness
from ._robots import RobotsCache
from ._ssrf import DestinationPolicy

__all__ = ["PinnedBackend", "Pools", "Session", "pinned_transport"]


class _URLsToOrigins(logging.Filter):
    """Logs httpx's request lines with the URL cut to its origin (``https://host:port/…``).

    httpx logs every request's full URL at INFO; a target URL may carry a secret in its path
    or query string (a token, a signed link), so none reaches the log by default.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                _origin(arg) if isinstance(arg, httpx.URL) else arg for arg in record.args
            )
        return True


def _origin(url: httpx.URL) -> str:
    port = f":{url.port}" if url.port is not None else ""
    return f"{url.scheme}://{url.host}{port}/…"


_httpx_log = logging.getLogger("httpx")
if not any(isinstance(f, _URLsToOrigins) for f in _httpx_log.filters):
    _httpx_log.addFilter(_URLsToOrigins())

#: How long closing a run's connections may take (each is shut down politely first).
_CLOSE_SECONDS = 5.0


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """A network backend connecting only to the addresses a :class:`DestinationPolicy` allowed.

    ``connect_tcp(host, ...)`` asks the policy for the host's checked addresses (raising
    :class:`DestinationRefused` when it refuses) and connects to the first that answers; TLS
    still verifies the certificate against the host name httpcore passes to ``start_tls``.
    """

    def __init__(self, policy: DestinationPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to one of ``host``'s checked addresses; raises DestinationRefused if none."""
        addresses = await self._policy.addresses(host, port)
        candidates = [host] if addresses is None else addresses
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in candidates:
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # the policy never allows an empty list
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Refused: a policy judges network destinations, and a socket path is none."""
        raise httpcore.ConnectError("unix sockets are not reached through a destination policy")

    async def sleep(self, seconds: float) -> None:
        """Sleep on trio's clock."""
        await trio.sleep(seconds)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What every client of a fetcher is built with."""

    timeout: httpx.Timeout
    limits: httpx.Limits
    http2: bool
    verify: ssl.SSLContext
    headers: dict[str, str]
    trust_env: bool
    policy: DestinationPolicy | None
    transport: httpx.AsyncBaseTransport | None
    politeness: Politeness
    host_limits: HostLimits | None = None
    host_lease: float = 60.0


def open_client(settings: ClientSettings) -> httpx.AsyncClient:
    """A new client: the given transport, or a pool (pinned when there is a policy)."""
    transport = settings.transport
    if transport is None and settings.policy is not None:
        transport = pinned_transport(
            settings.policy, settings.verify, limits=settings.limits, http2=settings.http2
        )
    return httpx.AsyncClient(
        timeout=settings.timeout,
        follow_redirects=False,
        verify=settings.verify if transport is None else True,
        transport=transport,
        limits=settings.limits,
        http2=settings.http2,
        trust_env=settings.trust_env,
        headers=settings.headers,
    )


def pinned_transport(
    policy: DestinationPolicy,
    verify: ssl.SSLContext,
    *,
    limits: httpx.Limits | None = None,
    http2: bool = False,
) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose every connection goes through :class:`PinnedBackend`: only to
    an address ``policy`` has just checked (the fetcher's, and the webhook sender's)."""
    limits = httpx.Limits() if limits is None else limits
    transport = httpx.AsyncHTTPTransport(verify=verify, http2=http2, limits=limits, trust_env=False)
    # httpx takes no network backend, so the pool it built is replaced by the same one
    # connecting through the policy; httpx still maps httpcore's errors to its own.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=verify,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=http2,
        network_backend=PinnedBackend(policy),
    )
    return transport


@dataclass(eq=False)
class Session:
    """One trio run's client and per-host state, shared by every call in that run."""

    client: httpx.AsyncClient
    hosts: Hosts
    robots: RobotsCache
    users: int = 0


class Pools:
    """The sessions of one fetcher, one per trio run that entered it (reference counted)."""

    def __init__(self, settings: Callable[[], ClientSettings], user_agent: str) -> None:
        self._settings = settings
        self._user_agent = user_agent
        self._sessions: dict[trio.lowlevel.TrioToken, Session] = {}

    def _new(self) -> Session:
        settings = self._settings()
        return Session(
            open_client(settings),
            Hosts(settings.politeness, shared=settings.host_limits, lease=settings.host_lease),
            RobotsCache(self._user_agent),
        )

    def current(self) -> Session | None:
        """The session of the current trio run, if it entered the fetcher."""
        return self._sessions.get(trio.lowlevel.current_trio_token())

    def enter(self) -> Session:
        """Open the current run's session, or count one more user of it."""
        token = trio.lowlevel.current_trio_token()
        session = self._sessions.get(token)
        if session is None:
            session = self._new()
            self._sessions[token] = session
        session.users += 1
        return session

    async def leave(self, *, close: bool = False) -> None:
        """One user fewer; the last one (or ``close``) closes the run's connections.

        Closing is shielded and bounded, so it completes on cancellation too.
        """
        token = trio.lowlevel.current_trio_token()
        session = self._sessions.get(token)
        if session is None:
            return
        session.users -= 1
        if session.users > 0 and not close:
            return
        del self._sessions[token]
        with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_SECONDS):
            await session.client.aclose()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Session]:
        """The run's session, or a session of its own for a call outside any entered block."""
        session = self.current()
        if session is not None:
            yield session
            return
        own = self._new()
        try:
            yield own
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_SECONDS):
                await own.client.aclose()
