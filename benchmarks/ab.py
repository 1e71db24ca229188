"""One measurement at two commits, paired: ``python -m benchmarks.ab BASE [NAME ...] [--rounds N]``.

How a change is judged on a shared, noisy machine: each round runs the measurement once in a
checkout of ``BASE`` (a throw-away ``git worktree``) and once in this tree, in alternating
order, each in a fresh process; the figure is the median over rounds of the ratio within a
round (this tree / ``BASE``), so both sides of a ratio saw the same moment of the machine.

Measurements (targets/s of :mod:`benchmarks.workloads` and :mod:`benchmarks.minimal`, on a
fresh file database each time): ``cycle1`` and ``cycle8`` (build targets, submit, ``wait``,
1 and 8 callers), ``serial`` (one job after another), ``concurrent`` (8 jobs at once); and
``refusal``, refused submits per CPU second (:mod:`benchmarks.refusals`).
Each side imports the code of its own tree, so ``BASE`` must have these functions (every
commit since the cycle benchmark was added does); ``refusal`` is this tree's file run
against either tree's code (it uses the public API only).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: What each measurement runs, as Python in the measured tree (prints one number: targets/s).
MEASUREMENTS = {
    "cycle1": "workloads.measure_cycle(path, callers=1, jobs_per_caller=100)",
    "cycle8": "workloads.measure_cycle(path, callers=8, jobs_per_caller=25)",
    "serial": "workloads.measure_serial(path, jobs=100)",
    "concurrent": "workloads.measure_concurrent(path, jobs_per_caller=25).targets_per_s",
    "refusal": "refusals['rate'](path)",
}
#: What each figure counts (per second); targets unless named here.
UNITS = {"refusal": "refusals/CPU-s"}
_SCRIPT = (
    "import os, runpy, sys, tempfile\n"
    "from benchmarks import workloads\n"
    f"refusals = runpy.run_path({str(Path(__file__).with_name('refusals.py'))!r})\n"
    "with tempfile.TemporaryDirectory() as d:\n"
    "    path = os.path.join(d, 'ab.db')\n"
    "    print({expr})\n"
)
#: The longest one measurement may take (seconds) before the run is abandoned.
MEASURE_TIMEOUT = 300


def measure(tree: Path, name: str) -> float:
    """The figure of measurement ``name`` in a fresh process importing ``tree``'s code."""
    script = _SCRIPT.format(expr=MEASUREMENTS[name])
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=MEASURE_TIMEOUT,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def paired(base: Path, here: Path, name: str, rounds: int) -> list[tuple[float, float]]:
    """``(base, here)`` targets/s for each round, the order swapped every other round."""
    figures = []
    for r in range(rounds):
        if r % 2 == 0:
            a = measure(base, name)
            b = measure(here, name)
        else:
            b = measure(here, name)
            a = measure(base, name)
        figures.append((a, b))
        print(f"{name} round {r + 1}: base {a:,.0f}, here {b:,.0f}, {b / a:.3f}x", file=sys.stderr)
    return figures


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, measure in turn, print one line per measurement."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__)
    parser.add_argument("base", help="the commit to compare this tree with, e.g. main or HEAD~3")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of {', '.join(MEASUREMENTS)}")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    names = args.names or list(MEASUREMENTS)
    unknown = sorted(set(names) - set(MEASUREMENTS))
    if unknown:
        parser.error(f"unknown measurement(s): {', '.join(unknown)}")
    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="trio-batch-ab-") as scratch:
        base = Path(scratch) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--quiet", str(base), args.base],
            cwd=here,
            check=True,
        )
        try:
            for name in names:
                figures = paired(base, here, name, args.rounds)
                ratio = statistics.median(b / a for a, b in figures)
                a_med = statistics.median(a for a, _ in figures)
                b_med = statistics.median(b for _, b in figures)
                unit = UNITS.get(name, "targets/s")
                print(
                    f"{name:<11} base {a_med:>9,.0f}  here {b_med:>9,.0f} {unit}   "
                    f"{ratio:.3f}x (median of {args.rounds} paired rounds)"
                )
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=here, check=False
            )


if __name__ == "__main__":
    main()
