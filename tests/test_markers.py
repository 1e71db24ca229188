"""The markers ``make test-fast`` deselects by are set from the fixtures a test uses.

Each check collects real test files of the suite in a fresh pytest (``--collect-only``) and
reads the markers every selected test carries (tests/support/show_markers.py prints them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILES = [
    "tests/store/test_store_conformance.py",  # job_store: one parameter reaches PostgreSQL
    "tests/store/test_postgres_create.py",  # pg_dsn, and a parameter that reaches PgBouncer
    "tests/http/test_dashboard.py",  # the browser fixture, and tests without it
    "tests/runner/test_crash_campaign.py",  # a slow suite
    "tests/test_benchmarks_smoke.py",  # the peers tests
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
    # An -m that selects every test yet does not name peers: the peers stay out.
    found = markers("-m", "slow or not slow", *FILES)
    assert not any("test_peer[" in test for test in found)
    assert any("test_benchmarks_smoke.py" in test for test in found)
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


def test_peers_are_collected_when_m_names_them() -> None:
    peers = markers("-m", "peers", "tests/test_benchmarks_smoke.py")
    assert peers and all("test_peer[" in test and "peers" in names for test, names in peers.items())
