"""Fetching ``http://``, ``https://`` and ``file://`` URLs: :class:`HttpFetcher`."""

from __future__ import annotations

import collections
import functools
import hashlib
import math
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import trio

from .._model import Result, Target
from .._text import MAX_SECONDS, check_whole, is_finite, parse_count, safe_text
from .._version import __version__
from ..store import HostLimits
from ._answers import (
    REDIRECT_CODES,
    TRANSIENT,
    conditional_headers,
    decoded_headers,
    parse_retry_after,
    redirect_target,
    split_content_type,
    status_error,
)
from ._body import Body
from ._bounded import WorkerPool, process_bounded
from ._errors import (
    FetchError,
    FetchTimeout,
    NetworkError,
    RedirectError,
    URLError,
)
from ._files import fetch_file
from ._hosts import HostFigures, Politeness
from ._options import check_target, plan_for
from ._pool import ClientSettings, Pools, Session
from ._provenance import provenance
from ._recorded import check_recording, obtain
from ._robots import ROBOTS_MAX_BYTES
from ._snapshots import SnapshotStore
from ._ssrf import DestinationPolicy
from ._urls import check_http_url, host_key, response_too_large, split_url, unsupported_scheme

__all__ = ["CheckURL", "HttpFetcher", "http_fetch", "parse_retry_after"]

#: A hook called with every URL before it is requested: the first one and each redirect hop.
#: It returns to allow the request, or raises (ideally :class:`URLRefused`) to refuse it.
CheckURL = Callable[[str], Awaitable[None]]


_HTTP_SCHEMES = ("http", "https")


def _check_arguments(
    seconds: tuple[float, float, float], counts: dict[str, tuple[int | None, int]]
) -> None:
    """Refuse :class:`HttpFetcher` arguments no fetch can use, at construction: every fetch
    has a deadline, and a count is a whole number from its least to what a C long holds. A
    NaN max_bytes let every body through (no comparison with NaN is true), a float
    max_redirects failed every fetch, a NaN max_connections hung each one to its timeout, and
    a process_memory or process_timeout past a C long failed each processed body."""
    names = ("timeout", "connect_timeout", "process_timeout")
    for name, value in zip(names, seconds, strict=True):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (is_finite(value) and 0 < value <= MAX_SECONDS)
        ):
            raise ValueError(
                f"{name} must be a positive, finite number of seconds up to {MAX_SECONDS:g}, "
                f"not {safe_text(value, 40)}"
            )
    for name, (count, low) in counts.items():
        if count is not None:
            check_whole(name, count, low=low)


class HttpFetcher:
    """A configurable fetch function for ``http://``, ``https://`` and ``file://`` URLs.

    An instance is a runner ``FetchFunc``: ``await fetcher(target)`` returns a
    :class:`~trio_batch.Result` or raises a :class:`FetchError`. :data:`http_fetch` is an
    instance with the defaults.

    - ``timeout``: seconds for the whole fetch of one target: every redirect hop and the
      complete body (a server that trickles bytes cannot hold a target forever).
    - ``connect_timeout``: seconds to open each connection.
    - ``max_bytes``: largest body, after content decoding; the body is streamed and the fetch
      stops as soon as it goes past (``ResponseTooLarge``).
    - ``max_redirects``: redirects followed per target. Redirects are followed only to
      ``http``/``https`` URLs, never to ``file:`` or any other scheme.
    - ``allow_file``: whether ``file://`` URLs may be fetched. A service that fetches URLs sent
      by others should pass False.
    - ``check_url``: an async hook called with each URL before it is requested (the first URL
      and every redirect hop, ``file://`` ones included); it raises (e.g. :class:`URLRefused`)
      to refuse. This is where a service plugs in an SSRF policy. Note that a policy which
      resolves host names itself should also pin the addresses it checked, for instance
      through ``transport``, or a DNS answer that changes between check and connect slips by.
    - ``transport``: an ``httpx.AsyncBaseTransport`` to send requests through (default: httpx's
      own connection pool with TLS verified against ``verify``).
    - ``verify``: the ``ssl.SSLContext`` servers are verified with (default: certifi's CA
      bundle).
    - ``http2``: offer HTTP/2 (ALPN); a server that takes it gets one multiplexed connection.
    - ``max_connections``: connections open at once, over all hosts (idle keep-alive ones
      are closed first when the pool is full).
    - ``per_host_concurrency``: requests in flight to one host at once, over every job.
    - ``per_host_rate``: requests started per second to one host (None: no rate limit).
    - ``max_host_pause``: the longest a 429 (or a 503 with ``Retry-After``) pauses its host
      for every job; see :mod:`trio_batch.fetchers._hosts`. Time spent waiting for a host's
      turn does not count toward ``timeout``.
    - ``host_limits``: a :class:`~trio_batch.store.HostLimits` (a PostgreSQL store) that holds
      the per-host concurrency, rate and pause for every runner on it, beside this fetcher's
      own (default None: this process's limits only). ``open_runner`` passes its store when
      it is one; see :meth:`use_host_limits`.
    - ``process_timeout``: seconds the processing of one body (grep, jq, HTML to text, PDF)
      may take; past it the worker process doing it is killed and the target fails with
      :class:`ContentError`. It is also the worker's CPU-time limit.
    - ``process_memory``: bytes of address space the worker processing one body may use
      (``RLIMIT_AS``); past it the target fails with :class:`ContentError`.
    - ``max_output``: largest text processing may make of a body, in UTF-8 bytes (default
      ``max_bytes``); past it the target fails with :class:`OutputTooLarge`, nothing stored.
    - ``process_workers``, ``process_workers_per_caller``, ``process_workers_ceiling``:
      worker processes for processing busy at once as a rule (default: the cores plus two),
      for one caller at once (default: half of them), and ever (default: twice
      ``process_workers``; plus one spare started ahead while the pool is full). Past
      ``process_workers`` a worker is started only for a caller that holds none, so a caller
      with nothing running is served at once however busy the others are; a freed worker
      goes to the waiting caller that holds the fewest (see ``_bounded``).
    - ``context_lines``: how many lines either side of a match ``context: true`` keeps.
    - ``user_agent``: the ``User-Agent`` header.
    - ``trust_env``: honour ``HTTP(S)_PROXY``/``NO_PROXY`` and ``SSL_CERT_FILE`` as httpx does.
    - ``obey_robots``: fetch each origin's robots.txt first (once an hour per session, through
      the same policy and limits) and fail a disallowed URL with :class:`RobotsDisallowed`;
      see ``_robots``.
    - ``snapshots``: the :class:`~trio_batch.fetchers.SnapshotStore` that targets with the
      options ``snapshot`` and ``replay`` keep their responses in and replay them from (see
      ``_recorded``); None: those options are refused at submit.
    - ``now``: the wall clock results' ``meta["fetched_at"]`` is read from (default
      ``time.time``).

    Every result's ``meta`` carries the response's provenance (final URL, redirect chain,
    status, content type, validators, ``Date``, the body's size and sha256, when it was
    fetched, the fetcher's version; see ``_provenance``).

    Connections: inside ``async with fetcher:`` (``open_runner`` enters a fetch function that
    is an async context manager, so a runner's jobs share it) every call of that trio run
    shares one pool of keep-alive connections and one set of per-host limits; leaving the last
    such block closes them. A call outside any such block opens a client of its own and closes
    it before returning. One fetcher may be used from any number of trio runs and tasks.
    When ``check_url`` is a :class:`DestinationPolicy` and no ``transport`` is given, new
    connections go only to addresses the policy allowed (DNS pinning, see ``_pool``);
    environment proxies are then not used.
    CPU-heavy processing (HTML, PDF, jq, regex) runs in a worker process that is killed when
    it goes past ``process_timeout`` or ``process_memory`` (see ``_bounded``), so a costly
    pattern never holds the event loop; cancelling the fetch kills the worker too.
    """

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        max_bytes: int = 10 * 1024 * 1024,
        max_redirects: int = 5,
        allow_file: bool = True,
        check_url: CheckURL | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        verify: ssl.SSLContext | None = None,
        http2: bool = False,
        max_connections: int = 100,
        per_host_concurrency: int = 4,
        per_host_rate: float | None = None,
        max_host_pause: float = 30.0,
        process_timeout: float = 10.0,
        process_memory: int = 2 * 1024 * 1024 * 1024,
        max_output: int | None = None,
        process_workers: int | None = None,
        process_workers_per_caller: int | None = None,
        process_workers_ceiling: int | None = None,
        context_lines: int = 1,
        user_agent: str = f"trio-batch/{__version__}",
        trust_env: bool = True,
        obey_robots: bool = False,
        host_limits: HostLimits | None = None,
        now: Callable[[], float] = time.time,
        snapshots: SnapshotStore | None = None,
    ) -> None:
        _check_arguments(
            (timeout, connect_timeout, process_timeout),
            {
                "max_bytes": (max_bytes, 0),
                "max_redirects": (max_redirects, 0),
                "max_connections": (max_connections, 1),
                "process_memory": (process_memory, 64 * 1024 * 1024),
                "max_output": (max_output, 0),
                "process_workers": (process_workers, 1),
                "process_workers_per_caller": (process_workers_per_caller, 1),
                "process_workers_ceiling": (process_workers_ceiling, 1),
                "context_lines": (context_lines, 0),
            },
        )
        self.politeness = Politeness(
            concurrency=per_host_concurrency,
            rate=per_host_rate,
            max_pause=max_host_pause,
            first_pause=min(1.0, max_host_pause),
        )
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.allow_file = allow_file
        self.check_url = check_url
        self.transport = transport
        self.verify = verify
        self.http2 = http2
        self.max_connections = max_connections
        self.process_timeout = process_timeout
        self.process_memory = process_memory
        self.max_output = max_bytes if max_output is None else max_output
        self.workers = WorkerPool(
            process_workers, process_workers_per_caller, process_workers_ceiling
        )
        self.context_lines = context_lines
        self.user_agent = user_agent
        self.trust_env = trust_env
        self.obey_robots = obey_robots
        self.host_limits = host_limits
        self.now = now
        self.snapshots = snapshots
        #: Responses kept in and taken from snapshots, by outcome (see ``_recorded``).
        self.snapshot_counts: collections.Counter[str] = collections.Counter()
        self._pools = Pools(self._client_settings, user_agent)

    async def __aenter__(self) -> HttpFetcher:
        """Share one connection pool and per-host limits among this trio run's calls."""
        self._pools.enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Leave the block; the last one out closes the run's connections (shielded)."""
        await self._pools.leave()

    async def aclose(self) -> None:
        """Close this trio run's connections now, however many blocks are still open.

        Later calls open a client each until the fetcher is entered again.
        """
        await self._pools.leave(close=True)

    def use_host_limits(self, limits: HostLimits | None) -> None:
        """Share per-host limits through ``limits`` from now on (None: this process's only),
        in sessions opened later and in the current trio run's session."""
        self.host_limits = limits
        session = self._pools.current()
        if session is not None:
            session.hosts.shared = limits

    def host_figures(self) -> list[HostFigures]:
        """Per-host figures of the current trio run's shared session (empty outside one)."""
        session = self._pools.current()
        return [] if session is None else session.hosts.figures()

    def _client_settings(self) -> ClientSettings:
        return ClientSettings(
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            limits=httpx.Limits(
                max_connections=self.max_connections,
                max_keepalive_connections=self.max_connections,
            ),
            http2=self.http2,
            verify=self._ssl_context if self.verify is None else self.verify,
            headers={"User-Agent": self.user_agent},
            trust_env=self.trust_env,
            policy=self.check_url if isinstance(self.check_url, DestinationPolicy) else None,
            transport=self.transport,
            politeness=self.politeness,
            host_limits=self.host_limits,
            host_lease=self.timeout + 10.0,
        )

    def __repr__(self) -> str:
        return (
            f"HttpFetcher(timeout={self.timeout!r}, max_bytes={self.max_bytes!r}, "
            f"max_redirects={self.max_redirects!r}, allow_file={self.allow_file!r})"
        )

    def check_target(self, target: Target) -> None:
        """The runner's submit-time hook: raises :class:`OptionError` for a bad option."""
        check_target(target)
        check_recording(target.options, self.snapshots)

    async def __call__(self, target: Target) -> Result:
        """Fetch ``target`` and process its body as its options say."""
        plan = plan_for(target.options)
        got = await obtain(
            target,
            self.snapshots,
            self._fetch_body,
            self.now,
            self.max_bytes,
            self.snapshot_counts,
        )
        body = got.body
        content, extra = await process_bounded(
            plan,
            body,
            self.context_lines,
            seconds=self.process_timeout,
            memory=self.process_memory,
            max_output=self.max_output,
            pool=self.workers,
        )
        meta: dict[str, Any] = provenance(body, got.fetched_at)
        meta.update(got.meta)
        meta.update(extra)
        return Result(content, meta)

    async def _fetch_body(
        self,
        url: str,
        validators: tuple[str | None, str | None] | None = None,
        keep_errors: bool = False,
    ) -> Body | None:
        """Fetch ``url`` within the fetcher's timeout; returns the raw body and its metadata.

        ``validators``: ``(etag, last_modified)`` sent as ``If-None-Match`` and
        ``If-Modified-Since``; a 304 answer then returns None. ``keep_errors``: a 4xx or 5xx
        answer is returned as a body (read within ``max_bytes``) rather than raised, for a
        snapshot to keep it."""
        parts = split_url(url)
        scheme = parts.scheme.lower()
        with trio.move_on_after(self.timeout) as scope:
            if scheme in _HTTP_SCHEMES:
                check_http_url(url)
                return await self._fetch_http(
                    url, scope, conditional_headers(validators), keep_errors=keep_errors
                )
            if scheme == "file" and self.allow_file:
                if self.check_url is not None:
                    await self.check_url(url)
                return await fetch_file(url, self.max_bytes)
            raise unsupported_scheme(url, scheme, allow_file=self.allow_file)
        assert scope.cancelled_caught
        raise FetchTimeout(
            f"gave up on {url} after {self.timeout:g} s",
            hint="the server is slow or stalled; try again later or raise the fetcher's timeout",
            retryable=True,
        )

    @functools.cached_property
    def _ssl_context(self) -> ssl.SSLContext:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())

    async def _fetch_http(
        self,
        url: str,
        deadline: trio.CancelScope,
        conditional: dict[str, str],
        *,
        keep_errors: bool,
    ) -> Body | None:
        async with self._pools.session() as session:
            return await self._fetch_hops(
                session, url, deadline, conditional=conditional, keep_errors=keep_errors
            )

    async def _fetch_hops(
        self,
        session: Session,
        url: str,
        deadline: trio.CancelScope,
        *,
        robots: bool = True,
        keep: int | None = None,
        conditional: dict[str, str] | None = None,
        keep_errors: bool = False,
    ) -> Body | None:
        """Follow ``url``'s redirects through ``session``; ``deadline`` is the fetch's scope,
        moved on by the time spent waiting for a host's turn. ``robots``: check each hop
        against its origin's robots.txt (when the fetcher obeys it). ``keep``: read at most
        that many bytes of the body and drop the rest (instead of failing past ``max_bytes``).
        ``conditional``: validator headers sent with each request; a 304 answer to them
        returns None. ``keep_errors``: a 4xx or 5xx answer is returned, not raised.
        """

        async def robots_text(robots_url: str) -> str:
            body = await self._fetch_hops(
                session, robots_url, deadline, robots=False, keep=ROBOTS_MAX_BYTES
            )
            assert body is not None  # not a conditional request
            data = body.data
            if len(data) >= ROBOTS_MAX_BYTES:  # cut: the last line may be half a rule
                data = data[: data.rfind(b"\n") + 1]
            return data.decode("utf-8", "replace")

        client = session.client
        current = url
        chain: list[str] = []
        try:
            for hop in range(self.max_redirects + 1):
                if self.check_url is not None:
                    await self.check_url(current)
                request = client.build_request("GET", current, headers=conditional)
                if robots and self.obey_robots:  # the URL as sent: dot segments resolved
                    await session.robots.check(str(request.url), robots_text)
                # The fetch's clock stops while it waits for the host's turn (a pause may
                # outlast the timeout) and starts again with what was left.
                left = deadline.deadline - trio.current_time()
                deadline.deadline = math.inf
                async with session.hosts.slot(host_key(request.url.host)) as ticket:
                    deadline.deadline = trio.current_time() + left
                    try:
                        response = await client.send(request, stream=True)
                    except (httpx.InvalidURL, UnicodeError) as exc:
                        # httpx parses the Location of a redirect even when not following
                        # it; an "xn--" host that is not IDNA raises the idna package's
                        # UnicodeError there (the URLs sent were checked before: this is it).
                        raise RedirectError(
                            f"{current} redirects to an invalid URL: {exc}",
                            hint="the server sent a broken Location header; report it to the site",
                        ) from None
                    try:
                        retry_after = response.headers.get("retry-after")
                        await session.hosts.report(ticket, response.status_code, retry_after)
                        location = response.headers.get("location")
                        if response.status_code in REDIRECT_CODES and location is not None:
                            if hop == self.max_redirects:
                                raise RedirectError(
                                    f"more than {self.max_redirects} redirects, starting at {url}",
                                    hint="the URL may redirect in a loop; fetch the final URL "
                                    "directly or raise the fetcher's max_redirects",
                                )
                            chain.append(current)
                            current = redirect_target(response, location)
                            continue
                        if response.status_code == 304 and conditional:
                            return None
                        if response.status_code >= 400 and not keep_errors:
                            raise status_error(response)
                        data, digest = await self._read_capped(response, keep)
                        content_type, charset = split_content_type(
                            response.headers.get("content-type")
                        )
                        return Body(
                            str(response.url),
                            response.status_code,
                            content_type,
                            charset,
                            data,
                            hop,
                            tuple(chain),
                            decoded_headers(response),
                            response.reason_phrase,
                            response.http_version,
                            digest,
                        )
                    finally:
                        # An unread or half-read body closes its connection rather than
                        # going back to the pool (httpcore shields this close).
                        await response.aclose()
        except httpx.TimeoutException as exc:
            raise FetchTimeout(
                f"{type(exc).__name__} while fetching {current}",
                hint="the server is slow or unreachable; try again later or raise the "
                "fetcher's timeout",
                retryable=True,
            ) from None
        except httpx.InvalidURL as exc:
            raise URLError(
                f"{current!r} is not a valid URL: {exc}",
                hint="check the URL for typos and unescaped characters",
            ) from None
        except httpx.TransportError as exc:
            raise NetworkError(
                f"{type(exc).__name__} while fetching {current}: {exc or 'no details'}",
                hint="check the host name and that the server is up and reachable",
                # A refused, reset or broken connection may work a moment later; a TLS or
                # protocol mismatch will not.
                retryable=isinstance(exc, TRANSIENT),
            ) from None
        except httpx.HTTPError as exc:  # pragma: no cover - httpx raises the ones above
            raise FetchError(f"{type(exc).__name__} while fetching {current}: {exc}") from None
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _read_capped(
        self, response: httpx.Response, keep: int | None = None
    ) -> tuple[bytes, str]:
        """The body, failing past ``max_bytes``; with ``keep``, its first ``keep`` bytes. And
        its hex sha256, hashed chunk by chunk as it arrives (a big body hashed at the end
        would hold the event loop)."""
        length = parse_count(response.headers.get("content-length", ""), max_digits=30)
        if keep is None and length is not None and length > self.max_bytes:
            raise response_too_large(str(response.url), f"{length} bytes", self.max_bytes)
        data = bytearray()
        hasher = hashlib.sha256()
        async for chunk in response.aiter_bytes():
            data += chunk
            if keep is not None and len(data) >= keep:
                kept = bytes(data[:keep])
                return kept, hashlib.sha256(kept).hexdigest()
            hasher.update(chunk)
            if keep is None and len(data) > self.max_bytes:
                size = f"more than {self.max_bytes} bytes"
                raise response_too_large(str(response.url), size, self.max_bytes)
        return bytes(data), hasher.hexdigest()


#: The default fetcher: ``HttpFetcher()`` with its default limits (30 s, 10 MiB, 5 redirects).
http_fetch = HttpFetcher()
