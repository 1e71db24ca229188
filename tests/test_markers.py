"""The markers ``make test-fast`` deselects by are set from the fixtures a test uses.

Each check collects real test files of the suite in a fresh pytest (``--collect-only``) and
reads the markers every selected test carries (tests/support/show_markers.py prints them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FILES = [
    "tests/store/test_store_conformance.py",  # job_store: one parameter reaches PostgreSQL
    "tests/store/test_postgres_create.py",  # pg_dsn, and a parameter that reaches PgBouncer
    "tests/http/test_dashboard.py",  # the browser fixture, and tests without it
    "tests/runner/test_crash_campaign.py",  # a slow suite
]


def markers(*args: str) -> dict[str, set[str]]:
    """Each test ``pytest --collect-only *args`` selects, with the markers it carries."""
    pytest = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(
        [*pytest, "-p", "tests.support.show_markers", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("MARKS "):
            names, test = line.removeprefix("MARKS ").split("\t", 1)
            found[test] = set(names.split(",")) - {""}
    return found


def test_each_test_is_marked_for_the_parts_its_fixtures_need() -> None:
    found = markers(*FILES)
    conformance = {t: m for t, m in found.items() if "test_store_conformance" in t}
    assert any("[postgres" in t for t in conformance)
    assert any("[sqlite-memory" in t for t in conformance)
    for test, names in conformance.items():
        assert ("postgres" in names) == ("[postgres" in test), test

    create = {t: m for t, m in found.items() if "test_postgres_create" in t}
    assert any("[pooled" in t for t in create) and any("[direct" in t for t in create)
    for test, names in create.items():
        assert ("pgbouncer" in names) == ("[pooled" in test), test
        if "[" in test:  # through the dsn fixture, which takes pg_dsn
            assert "postgres" in names, test
    digest = "tests/store/test_postgres_create.py::test_the_submit_function_is_the_one_the_"
    assert create[f"{digest}migrations_make"] == set()  # reads no database

    dashboard = {t: m for t, m in found.items() if "test_dashboard.py" in t}
    redirect = "tests/http/test_dashboard.py::test_the_dashboard_is_served_with_strict_headers"
    assert "browser" not in dashboard[redirect]  # it takes serve, not the browser
    assert any("browser" in names for names in dashboard.values())

    campaign = [m for t, m in found.items() if "test_crash_campaign" in t]
    assert campaign and all("slow" in names for names in campaign)


UNMARKED = """
import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def where(request):
    return request.getfixturevalue("pg_dsn") if request.param == "postgres" else ":memory:"


def test_reaches_postgresql_at_run_time(where):
    assert where
"""


# It starts a PostgreSQL of its own, in the pytest it runs: marked here, as no fixture says so.
@pytest.mark.postgres
def test_a_test_reaching_postgresql_at_run_time_unmarked_fails_and_says_how_to_mark_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.support.markers import pytest_collection_modifyitems  # noqa: F401\n"
        "from tests.support.pg_server import pg_dsn, pg_server  # noqa: F401\n"
    )
    (tmp_path / "test_unmarked.py").write_text(UNMARKED)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 passed, 1 error" in proc.stdout, proc.stdout
    assert "uses pg_dsn without the 'postgres' marker" in proc.stdout, proc.stdout
    assert "pytest.param(..., marks=pytest.mark.postgres)" in proc.stdout, proc.stdout
