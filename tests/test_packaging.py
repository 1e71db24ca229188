"""The published artefacts: the wheel and the sdist hold what a user of the package needs."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import trio_batch

REPO = Path(__file__).resolve().parents[1]


def _build(out: Path) -> tuple[Path, Path]:
    # No isolation: the dev group's hatchling builds it, with no index to reach.
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    return wheel, sdist


def test_the_wheel_and_the_sdist_hold_the_package_its_types_and_its_licence(
    tmp_path: Path,
) -> None:
    wheel, sdist = _build(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    dashboard = {p.name for p in (REPO / "trio_batch" / "http" / "static").iterdir()}
    for needed in [
        "trio_batch/__init__.py",
        "trio_batch/py.typed",
        "trio_batch/runner/__init__.py",
        "trio_batch/cli/__init__.py",
        "trio_batch/store/sqlite/__init__.py",
        "trio_batch/store/postgres/__init__.py",
        *(f"trio_batch/http/static/{name}" for name in dashboard),
    ]:
        assert needed in names, needed
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith("tests/") for n in names)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    from trio_batch import __version__

    assert f"Version: {__version__}\n" in text
    assert "Classifier: Framework :: Trio\n" in text
    assert "Classifier: Typing :: Typed\n" in text
    assert "License-Expression: MIT\n" in text
    # Development tools are dependency groups, not extras a user could install.
    extras = {
        line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("Provides-Extra")
    }
    assert {"cli", "http", "postgres"} <= extras
    assert not extras & {"dev", "bench", "docs"}

    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    for needed in ["LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "trio_batch/py.typed"]:
        assert needed in members, needed


def test_every_top_level_module_is_in_the_import_layers() -> None:
    """A module left out of the layers contract is checked by no one: its imports could flow
    either way."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    [layers] = [
        c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"
    ]
    named = {name.strip() for layer in layers for name in layer.split(":")}
    modules = {f"trio_batch.{m.name}" for m in pkgutil.iter_modules(trio_batch.__path__)}
    assert modules - named == set()
