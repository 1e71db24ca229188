"""The documentation's examples run as printed, and the site builds without a warning.

Every ```python block in README.md and docs/ that is a whole program (it calls ``trio.run``) is
run in a fresh process, and one that defines tests runs under pytest in trio mode; every other
Python block must at least compile. The site itself is
built by ``make docs`` (part of ``make test``) with warnings as errors.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        if "_build" in page.parts or "_generated" in page.parts:
            continue
        for n, match in enumerate(BLOCK.finditer(page.read_text()), start=1):
            found.append((f"{page.relative_to(REPO)}#{n}", match.group(1)))
    return found


BLOCKS = _blocks()


def test_the_pages_hold_examples() -> None:
    names = {name.split("#")[0] for name, _ in BLOCKS}
    assert {"README.md", "docs/tutorial/embedding.md"} <= names


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[name for name, _ in BLOCKS])
def test_each_example_runs_or_compiles(where: str, code: str, tmp_path: Path) -> None:
    if "trio.run(" not in code and re.search(r"^(async )?def test_", code, re.M):
        _passes_under_pytest(where, code, tmp_path)
        return
    if "trio.run(" not in code:
        compile(code, where, "exec")
        return
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,  # a jobs.db an example makes lands here
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{where} failed:\n{proc.stderr}"
    assert proc.stdout.strip(), f"{where} printed nothing"
    if where == "README.md#1":  # the front door's example: a job drained to its end
        assert proc.stdout.startswith("done (Job(")
        assert (tmp_path / "jobs.db").exists()


def _passes_under_pytest(where: str, code: str, tmp_path: Path) -> None:
    """Run a block of tests as a test file of its own, in trio mode (pytest-trio), as a user's
    suite would, and check that every test in it passed."""
    (tmp_path / "test_example.py").write_text(code)
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    # Only pytest-trio, as a user's suite has: not this suite's other plugins (Hypothesis,
    # schemathesis, xdist...), whose loading tripled the run's start.
    proc = subprocess.run(
        [*pytest, "-p", "pytest_trio.plugin", "-o", "trio_mode=true", "test_example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    assert proc.returncode == 0, f"{where} failed:\n{proc.stdout}{proc.stderr}"
    assert re.search(r"\b\d+ passed\b", proc.stdout) and "skipped" not in proc.stdout, proc.stdout


def test_the_series_the_production_page_names_are_the_services_own() -> None:
    from trio_batch.http._metrics import Metrics  # the registry /metrics answers from

    page = (REPO / "docs" / "how-to" / "production.md").read_text()
    section = page[page.index("## Watch `/metrics`") :]
    named = set(re.findall(r"`(trio_batch_\w+)", section))
    exposed = {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in Metrics().registry.collect()
    }
    assert len(named) >= 10
    assert named <= exposed, f"not on /metrics: {sorted(named - exposed)}"


def _literals() -> list[str]:
    """Every string literal in trio_batch/, an f-string as its literal pieces."""
    import ast

    pieces = []
    for path in (REPO / "trio_batch").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                pieces.append(node.value)
    return pieces


def test_what_the_troubleshooting_page_quotes_the_code_says() -> None:
    page = (REPO / "docs" / "how-to" / "troubleshooting.md").read_text()
    quotes = [q for q in re.findall(r'"([^"\n]{25,})"', page)]
    quotes += [" ".join(m.split("\n> ")) for m in re.findall(r"^> (.+(?:\n> .+)*)", page, re.M)]
    literals = _literals()
    assert len(quotes) >= 30
    for quote in quotes:
        # What the code fills in (numbers, names, ids) splits a quote into the code's pieces.
        for fragment in re.split(r"\d+(?:\.\d+)?|…|'[^']*'", quote):
            fragment = fragment.strip(" .,;:()")
            if len(fragment) >= 12:
                assert any(fragment in piece for piece in literals), (quote, fragment)
