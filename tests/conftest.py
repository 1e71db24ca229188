"""Shared fixtures: a fake wall clock, a scriptable fetch, an in-memory store, PostgreSQL."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from hypothesis import settings

from trio_batch import Store

# A fresh store of each backend in turn (backends.py).
from .support.backends import job_store  # noqa: F401
from .support.fakes import FakeClock, ScriptedFetch

# The hardening suites' figures: a fixture, and a hook that repeats them in the summary.
from .support.figures import figures, pytest_terminal_summary  # noqa: F401

# The markers make test-fast deselects by (postgres, pgbouncer, browser), set from the fixtures.
from .support.markers import pytest_collection_modifyitems  # noqa: F401

# A throw-away PostgreSQL server for the session, a fresh database per test (pg_server.py).
from .support.pg_server import pg_dsn, pg_proxy, pg_server  # noqa: F401

# A throw-away PgBouncer in transaction mode before it (pgbouncer.py).
from .support.pgbouncer import pgbouncer, pooled_dsn  # noqa: F401

# A local HTTPS webhook receiver that checks signatures (webhook_receiver.py).
from .support.webhook_receiver import receiver, webhook_ca  # noqa: F401

# Hypothesis' per-example deadline is a wall-clock threshold; on shared, loaded machines it
# fails correct code. Speed is measured in benchmarks/, never asserted in tests.
settings.register_profile("trio_batch", deadline=None)
settings.load_profile("trio_batch")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fetch() -> ScriptedFetch:
    return ScriptedFetch()


@pytest.fixture
def store() -> Store:
    return Store.open()


@pytest.fixture(autouse=True)
def _logging_put_back() -> Iterator[None]:
    """Every test leaves logging as it found it: a command run in-process (``trio-batch
    run``'s own set-up) quiets the ``trio_batch`` logger and stops it propagating, which would
    hide the next tests' records from ``caplog``."""
    root, own = logging.getLogger(), logging.getLogger("trio_batch")
    saved = (root.handlers[:], root.level, own.handlers[:], own.level, own.propagate)
    try:
        yield
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        own.handlers[:], own.level, own.propagate = saved[2], saved[3], saved[4]
