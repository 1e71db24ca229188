"""Test doubles the suites share: a fake wall clock, a scriptable fetch, a pass counter, an
event set by a log line."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import overload

import trio

from trio_batch import Options, Result, Target

T0 = 1_700_000_000.0


@dataclass
class FakeClock:
    """An injected wall clock for leases: time moves only when a test says so."""

    now: float = T0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def on_loop_thread() -> bool:
    """Whether the caller runs on the main thread, where the tests' trio loop runs (not on a
    store thread)."""
    return threading.current_thread() is threading.main_thread()


class PassCounter(trio.abc.Instrument):
    """Counts the passes of trio's scheduler (install with ``trio.lowlevel.add_instrument``)."""

    def __init__(self) -> None:
        self.passes = 0

    def after_io_wait(self, timeout: float) -> None:
        self.passes += 1


class SetsOnMessage(logging.Handler):
    """A log handler that sets a trio event when a record with ``message`` is logged."""

    def __init__(self, message: str, event: trio.Event) -> None:
        super().__init__()
        self.message, self.event = message, event

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == self.message:
            self.event.set()


@contextmanager
def logged(message: str, logger: str = "trio_batch") -> Iterator[trio.Event]:
    """An event set once ``logger`` (or a child) logs ``message``, while the block runs: what
    a test waits on where the code tells of a change only in its log."""
    event = trio.Event()
    handler = SetsOnMessage(message, event)
    log = logging.getLogger(logger)
    log.addHandler(handler)
    try:
        yield event
    finally:
        log.removeHandler(handler)


class Boom(Exception):
    """A fetch failure that carries a hint, as real fetchers' errors may."""

    hint = "check the URL"


@dataclass
class ScriptedFetch:
    """A fetch function whose behaviour is chosen per URL, recording what it was asked.

    The URL's last path segment picks the behaviour: ``fail`` raises :class:`Boom`, ``hang``
    sleeps forever, ``none`` returns None, ``dict`` returns a dict, ``badmeta`` returns a Result
    whose meta is not JSON, ``gate`` waits until the test sets :attr:`gates` for that URL.
    Anything else returns ``Result("content of <url>")``.
    """

    calls: list[str] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0
    gates: dict[str, trio.Event] = field(default_factory=dict)
    started: dict[str, trio.Event] = field(default_factory=dict)
    custom: dict[str, Callable[[], object]] = field(default_factory=dict)

    def watch(self, url: str) -> trio.Event:
        """An event set when the fetch of ``url`` starts."""
        return self.started.setdefault(url, trio.Event())

    def gate(self, url: str) -> tuple[trio.Event, trio.Event]:
        """(started, release) events: the fetch of ``url`` waits until ``release`` is set."""
        self.gates[url] = trio.Event()
        return self.watch(url), self.gates[url]

    async def __call__(self, target: Target) -> Result:
        self.calls.append(target.url)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await trio.lowlevel.checkpoint()
            if target.url in self.started:
                self.started[target.url].set()
            if target.url in self.gates:
                await self.gates[target.url].wait()
            kind = target.url.rsplit("/", 1)[-1]
            if target.url in self.custom:
                return self.custom[target.url]()  # type: ignore[return-value]
            if kind == "fail":
                raise Boom(f"cannot fetch {target.url}")
            if kind == "hang":
                await trio.sleep_forever()
            if kind == "none":
                return None  # type: ignore[return-value]
            if kind == "dict":
                return {"content": "x"}  # type: ignore[return-value]
            if kind == "badmeta":
                return Result("x", {"nan": float("nan")})
            return Result(f"content of {target.url}", {"url": target.url})
        finally:
            self.in_flight -= 1


def urls(*names: str) -> list[Target]:
    """Targets ``https://example.test/<name>`` for each name."""
    return [Target(f"https://example.test/{name}") for name in names]


class Shifting(Sequence[Target]):
    """Targets that are not the same at each read (a list another thread mutates while it is
    read, a lazy view): the first read ``first``, every later one ``later``."""

    def __init__(self, first: list[Target], later: list[Target]) -> None:
        self.reads, self._first, self._later = 0, first, later

    def _now(self) -> list[Target]:
        return self._first if self.reads <= 1 else self._later

    def __iter__(self) -> Iterator[Target]:
        self.reads += 1
        return iter(self._now())

    def __len__(self) -> int:
        return len(self._first)

    @overload
    def __getitem__(self, i: int) -> Target: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Target]: ...
    def __getitem__(self, i: int | slice) -> Target | Sequence[Target]:
        return self._now()[i]


PLAIN = [Target("https://a.test/0")]
WITH_OPTIONS = [Target("https://a.test/0", Options(mode="x"))]
