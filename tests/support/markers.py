"""The markers that say what a test needs, set from the fixtures it uses.

``make test-fast`` deselects what needs a part the machine may lack or takes long
(``-m "not postgres and not pgbouncer and not browser and not slow"``). Nobody marks a test by
hand: :func:`pytest_collection_modifyitems` (``tests/conftest.py`` imports it) marks every
test whose fixtures, directly or through other fixtures, include one of :data:`NEEDS`. A
fixture that reaches one of them at run time (``request.getfixturevalue``) cannot be seen at
collection; it marks its parameter instead (``pytest.param("postgres", marks=POSTGRES)``), and
:func:`require_marker`, which the PostgreSQL and PgBouncer fixtures call, fails a test that
reached one unmarked (it would otherwise run in ``make test-fast``).
Slow suites (the crash campaigns, the load, the store model, the big export) carry
``pytestmark = pytest.mark.slow``, and a module that starts a PostgreSQL of its own (the
cluster demo) ``pytestmark = pytest.mark.postgres``.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

__all__ = ["NEEDS", "PGBOUNCER", "POSTGRES", "pytest_collection_modifyitems", "require_marker"]

POSTGRES = pytest.mark.postgres
PGBOUNCER = pytest.mark.pgbouncer

#: The fixtures that need a part, and the markers a test using one gets.
NEEDS: Mapping[str, tuple[str, ...]] = {
    "pg_server": ("postgres",),  # pg_dsn and pg_proxy use it
    "pgbouncer": ("pgbouncer", "postgres"),  # pooled_dsn uses it
    "browser": ("browser",),  # Debian's chromium through Playwright
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with what its fixtures (their whole closure) need."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        names = {name for fixture, markers in NEEDS.items() if fixture in used for name in markers}
        for name in sorted(names):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)


def require_marker(request: pytest.FixtureRequest, marker: str) -> None:
    """Fail the test now if it reached ``request``'s fixture without ``marker``: it asked for
    the fixture at run time, where :func:`pytest_collection_modifyitems` could not see it."""
    if request.node.get_closest_marker(marker) is None:
        pytest.fail(
            f"{request.node.nodeid} uses {request.fixturename} without the {marker!r} marker: "
            f"take {request.fixturename} as an argument, or mark the parameter that reaches it "
            f"(pytest.param(..., marks=pytest.mark.{marker})); see tests/support/markers.py",
            pytrace=False,
        )
