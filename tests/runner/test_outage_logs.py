"""A database out of reach, as the runner's periodic calls log it: once as the outage begins
(a warning with the error) and once as it ends (how many calls were refused), not a
traceback per poll. The poll, the purge and the webhook delivery claims each make a call
every interval, the listener an attempt to connect with backoff; a real PostgreSQL behind a
proxy that refuses every connection is the outage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
import pytest
import trio

from trio_batch import Config, StoreUnavailable, open_runner, open_store
from trio_batch._outage_log import OutageLog
from trio_batch.fetchers import DestinationPolicy, WebhookSender

from ..support.cuttable_proxy import CuttableProxy
from ..support.fakes import ScriptedFetch
from ..support.pg_server import through
from ..support.webhook_receiver import Receiver

#: The periodic calls, as their records name them.
CALLS = (
    "poll the store for other runners' changes",
    "purge lapsed jobs",
    "claim a webhook delivery",
    "listen for other runners' changes",  # its connection's attempts, with backoff
)


def _records(caplog: pytest.LogCaptureFixture, what: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if what in r.getMessage()]


async def _until(predicate: Callable[[], bool]) -> None:
    """Until ``predicate()`` holds (60 s: a hang guard, not a measurement)."""
    with trio.fail_after(60):
        while not predicate():  # noqa: ASYNC110 - the records come from other tasks' calls
            await trio.sleep(0.02)


async def test_an_outage_is_logged_once_as_it_begins_and_once_as_it_ends(
    pg_dsn: str, pg_proxy: CuttableProxy, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_batch")
    config = Config(poll_interval=0.02, purge_interval=0.02, store_timeout=2.0)
    sender = WebhookSender(
        receiver.secret, DestinationPolicy(allow_private=True), ssl_context=receiver.client_context
    )
    async with (
        open_store(through(pg_proxy, pg_dsn)) as store,
        open_runner(store, ScriptedFetch(), config, webhooks=sender),
    ):
        pg_proxy.refusing = True
        pg_proxy.cut()

        def refused_often() -> bool:
            return all(
                len([r for r in _records(caplog, f"could not {c}") if r.levelno == logging.DEBUG])
                >= 1
                for c in CALLS
            )

        await _until(refused_often)  # each call refused twice or more: warned of once
        pg_proxy.refusing = False

        def answered_again() -> bool:
            return all(_records(caplog, f"the store answers again: {c}") for c in CALLS)

        await _until(answered_again)
    for call in CALLS:
        refusals = _records(caplog, f"could not {call}")
        warnings = [r for r in refusals if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert warnings[0].exc_info is not None  # the error itself, once
        # The runner's calls see the store's error; the listener, the driver's own.
        assert isinstance(warnings[0].exc_info[1], StoreUnavailable | psycopg.Error)
        assert {r.levelno for r in refusals} == {logging.WARNING, logging.DEBUG}
        (back, *_) = _records(caplog, f"the store answers again: {call}")
        assert back.levelno == logging.INFO
        # Every refusal before the answer is counted in it (more may follow: a later outage
        # of the same run would begin with a warning again).
        before = [r for r in refusals if r.created <= back.created]
        assert back.__dict__["failures"] == len(before)


def test_each_outage_of_a_call_begins_with_a_warning_and_ends_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="test.outage")
    outage = OutageLog(logging.getLogger("test.outage"), "do the thing")
    outage.answered()  # no outage yet: nothing to say
    for _ in range(3):
        outage.refused(StoreUnavailable("down"))
    outage.answered()
    outage.answered()
    outage.refused(StoreUnavailable("down again"))
    outage.answered()
    got = [(r.levelname, r.getMessage(), r.__dict__.get("failures")) for r in caplog.records]
    assert got == [
        ("WARNING", "could not do the thing; trying again: down", 1),
        ("DEBUG", "could not do the thing again: down", 2),
        ("DEBUG", "could not do the thing again: down", 3),
        ("INFO", "the store answers again: do the thing", 3),
        ("WARNING", "could not do the thing; trying again: down again", 1),
        ("INFO", "the store answers again: do the thing", 1),
    ]
