"""Figures the hardening suites print, and the soak knob that scales them.

A suite records a line with the ``figures`` fixture: the line is printed at once (visible with
``pytest -s``) and collected, and ``tests/conftest.py`` repeats every collected line in a
"figures" section of the terminal summary, so ``make test`` and ``make soak`` always show them.

``TRIO_BATCH_SOAK=1`` in the environment selects the long versions of the suites (``make soak``);
:func:`scaled` picks a suite's size accordingly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

#: True when the long versions of the suites are asked for (``make soak``).
SOAK = os.environ.get("TRIO_BATCH_SOAK", "") == "1"


def scaled(short: int, soak: int) -> int:
    """``soak`` under ``TRIO_BATCH_SOAK=1``, else ``short``."""
    return soak if SOAK else short


@dataclass
class Figures:
    """The lines recorded during the session, in order."""

    lines: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        """Print ``line`` now and keep it for the summary."""
        print(f"\n{line}")
        self.lines.append(line)


#: One collector for the whole session; the summary hook reads it.
SESSION_FIGURES = Figures()


@pytest.fixture
def figures() -> Iterator[Figures]:
    """The session's figure collector."""
    yield SESSION_FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Repeat every recorded figure at the end of the run."""
    if not SESSION_FIGURES.lines:
        return
    mode = "soak" if SOAK else "short"
    terminalreporter.section(f"figures ({mode})")
    for line in SESSION_FIGURES.lines:
        terminalreporter.write_line(line)
