"""Connecting again after a loss: at once, then with a short jittered backoff while attempts
fail (a failover under way, a full server, a pooler restarting), never a call held past its
deadline for the next attempt."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from trio_batch import StoreUnavailable
from trio_batch.store.postgres._connection import RECONNECT_BACKOFF, PostgresConnection


class Refusing:
    """A TCP server that accepts each connection and closes it at once, counting them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def refusing() -> Iterator[Refusing]:
    server = Refusing()
    yield server
    server.close()


class FakeTime:
    """A clock that only the sleeps move."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _store(port: int, fake: FakeTime) -> PostgresConnection:
    store = PostgresConnection(f"postgresql://postgres@127.0.0.1:{port}/x", store_timeout=5.0)
    store.clock, store.sleep = fake.clock, fake.sleep
    return store


def _attempt(store: PostgresConnection, within: float = 30.0) -> StoreUnavailable:
    with pytest.raises(StoreUnavailable) as refused:
        store.within(time.monotonic() + within, PostgresConnection.connection)
    return refused.value


def test_attempts_to_connect_are_spaced_by_a_growing_jittered_backoff(
    refusing: Refusing,
) -> None:
    fake = FakeTime()
    store = _store(refusing.port, fake)
    try:
        for _ in range(7):
            _attempt(store)
        # The first attempt at once; each later one after its backoff: 50 ms doubling to 1 s,
        # each within +-50% of its base.
        assert refusing.accepted == 7 and store.connect_failures == 7
        bases = [min(0.05 * 2**n, 1.0) for n in range(6)]
        assert len(fake.slept) == 6
        for slept, base in zip(fake.slept, bases, strict=True):
            assert base * 0.5 <= slept <= base * 1.5
        assert RECONNECT_BACKOFF.max_delay == 1.0
    finally:
        store.close(final=True)


def test_a_call_whose_deadline_comes_before_the_next_attempt_fails_at_once(
    refusing: Refusing,
) -> None:
    fake = FakeTime()
    store = _store(refusing.port, fake)
    try:
        for _ in range(6):  # the next attempt due in 0.5 s or more (a 1 s base, +-50%)
            _attempt(store)
        attempts = refusing.accepted
        said = _attempt(store, within=0.2)
        assert "past this call's deadline" in str(said)
        assert refusing.accepted == attempts  # no attempt made
    finally:
        store.close(final=True)


def test_a_connection_made_ends_the_backoff(refusing: Refusing, pg_dsn: str) -> None:
    fake = FakeTime()
    store = _store(refusing.port, fake)
    try:
        for _ in range(3):
            _attempt(store)
        store.conninfo = pg_dsn  # the server is back (a failover done)
        store.within(time.monotonic() + 30.0, PostgresConnection.connection)
        assert store.connect_failures == 0 and store.is_open
        store.close()  # lost again: the next attempt is made at once
        slept = len(fake.slept)
        store.within(time.monotonic() + 30.0, PostgresConnection.connection)
        assert len(fake.slept) == slept
    finally:
        store.close(final=True)
