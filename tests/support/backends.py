"""Every store backend, by id: what the suites that must hold on each are parametrised over."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from trio_batch import JobStore, open_store

from .markers import POSTGRES

#: A new backend adds its id here and a branch to :func:`open_backend`.
BACKENDS = ["sqlite-memory", "sqlite-file", pytest.param("postgres", marks=POSTGRES)]


def open_backend(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> JobStore:
    """A fresh, empty store of ``backend`` (the caller closes it)."""
    if backend == "postgres":
        # A fresh database of its own on the session's throw-away server (pg_server.py).
        return open_store(request.getfixturevalue("pg_dsn"))
    if backend == "sqlite-memory":
        return open_store(":memory:")
    if backend == "sqlite-file":
        return open_store(f"sqlite:///{tmp_path / 'store.db'}")
    raise AssertionError(f"unknown backend {backend}")


@pytest.fixture(params=BACKENDS)
async def job_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[JobStore]:
    """A fresh, empty store of each backend in turn, closed after the test."""
    store = open_backend(request.param, request, tmp_path)
    try:
        yield store
    finally:
        await store.aclose()
