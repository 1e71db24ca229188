"""Turn per-round figures into medians, ratios and verdicts; print them; write JSON and a chart.

``python -m benchmarks.report benchmarks/results/latest.json`` re-prints a saved run's table.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .stats import median, micros, percentile, ratio

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("trio-batch", "trio", "sqlite-utils", "outcome", "huey", "dbos", "matplotlib")

#: (ratio name, numerator figure, denominator figure); each ratio is taken within a round.
RATIOS = (
    ("serial_vs_floor", "serial.targets_per_s", "floor.targets_per_s"),
    ("concurrent_vs_floor", "concurrent.targets_per_s", "floor.targets_per_s"),
    ("concurrent_heartbeat_vs_floor", "concurrent_heartbeat.targets_per_s", "floor.targets_per_s"),
    ("minimal_serial_vs_floor", "minimal.serial.targets_per_s", "floor.targets_per_s"),
    ("minimal_concurrent_vs_floor", "minimal.concurrent.targets_per_s", "floor.targets_per_s"),
    ("serial_vs_minimal", "serial.targets_per_s", "minimal.serial.targets_per_s"),
    ("traced_vs_serial", "traced.serial.targets_per_s", "serial.targets_per_s"),
    ("traced_no_store_vs_serial", "traced_no_store.serial.targets_per_s", "serial.targets_per_s"),
    ("concurrent_vs_minimal", "concurrent.targets_per_s", "minimal.concurrent.targets_per_s"),
    ("cycle_serial_vs_minimal", "cycle.serial.targets_per_s", "minimal.serial.targets_per_s"),
    (
        "cycle_concurrent_vs_minimal",
        "cycle.concurrent.targets_per_s",
        "minimal.concurrent.targets_per_s",
    ),
    ("submit_vs_raw.p50", "submit.p50_us", "raw_submit.p50_us"),
    ("submit_vs_raw.p99", "submit.p99_us", "raw_submit.p99_us"),
    ("status_vs_raw.p50", "status.p50_us", "raw_status.p50_us"),
    ("status_vs_raw.p99", "status.p99_us", "raw_status.p99_us"),
    ("history.submit_vs_raw.p50", "history.submit.p50_us", "history.raw_submit.p50_us"),
    ("history.submit_vs_raw.p99", "history.submit.p99_us", "history.raw_submit.p99_us"),
    ("history.status_vs_raw.p50", "history.status.p50_us", "history.raw_status.p50_us"),
    ("history.status_vs_raw.p99", "history.status.p99_us", "history.raw_status.p99_us"),
    (
        "history_slowdown.serial",
        "serial_beside_history.targets_per_s",
        "history.serial.targets_per_s",
    ),
    (
        "settled_slowdown.serial",
        "serial_beside_history.targets_per_s",
        "settled.serial.targets_per_s",
    ),
    ("settled_slowdown.submit.p50", "settled.submit.p50_us", "submit.p50_us"),
    ("settled_slowdown.status.p50", "settled.status.p50_us", "status.p50_us"),
    ("settled.submit_vs_raw.p50", "settled.submit.p50_us", "settled.raw_submit.p50_us"),
    ("settled.submit_vs_raw.p99", "settled.submit.p99_us", "settled.raw_submit.p99_us"),
    ("settled.status_vs_raw.p50", "settled.status.p50_us", "settled.raw_status.p50_us"),
    ("settled.status_vs_raw.p99", "settled.status.p99_us", "settled.raw_status.p99_us"),
    ("history_slowdown.submit.p50", "history.submit.p50_us", "submit.p50_us"),
    ("history_slowdown.submit.p99", "history.submit.p99_us", "submit.p99_us"),
    ("history_slowdown.status.p50", "history.status.p50_us", "status.p50_us"),
    ("history_slowdown.status.p99", "history.status.p99_us", "status.p99_us"),
    ("history_slowdown.raw_submit.p50", "history.raw_submit.p50_us", "raw_submit.p50_us"),
    ("history_slowdown.raw_status.p50", "history.raw_status.p50_us", "raw_status.p50_us"),
    ("serial_vs_huey", "serial.targets_per_s", "huey.items_per_s"),
    ("concurrent_vs_huey", "concurrent.targets_per_s", "huey.items_per_s"),
    ("serial_vs_dbos", "serial.targets_per_s", "dbos.items_per_s"),
    ("concurrent_vs_dbos", "concurrent.targets_per_s", "dbos.items_per_s"),
    ("minimal_serial_vs_huey", "minimal.serial.targets_per_s", "huey.items_per_s"),
    ("minimal_concurrent_vs_huey", "minimal.concurrent.targets_per_s", "huey.items_per_s"),
    ("minimal_serial_vs_dbos", "minimal.serial.targets_per_s", "dbos.items_per_s"),
    ("minimal_concurrent_vs_dbos", "minimal.concurrent.targets_per_s", "dbos.items_per_s"),
)

#: (target, ratio or figure name, ">=" or "<=" or "<", threshold, how it is judged).
TARGETS = (
    ("serial >= 0.5x floor", "ratio:serial_vs_floor", ">=", 0.5),
    ("concurrent (8 jobs) >= 1.0x floor", "ratio:concurrent_vs_floor", ">=", 1.0),
    ("cycle, 1 caller >= 0.9x least code", "ratio:cycle_serial_vs_minimal", ">=", 0.9),
    ("cycle, 8 callers >= 0.9x least code", "ratio:cycle_concurrent_vs_minimal", ">=", 0.9),
    ("serial >= 2x Huey", "ratio:serial_vs_huey", ">=", 2.0),
    ("8 jobs >= 3x Huey", "ratio:concurrent_vs_huey", ">=", 3.0),
    ("serial >= 20x DBOS", "ratio:serial_vs_dbos", ">=", 20.0),
    ("submit p50 <= 2x raw SQL", "ratio:submit_vs_raw.p50", "<=", 2.0),
    ("status p50 <= 2x raw SQL", "ratio:status_vs_raw.p50", "<=", 2.0),
    ("serial at history <= 1.2x empty", "ratio:history_slowdown.serial", "<=", 1.2),
    ("submit p50 at history <= 1.2x empty", "ratio:history_slowdown.submit.p50", "<=", 1.2),
    ("status p50 at history <= 1.2x empty", "ratio:history_slowdown.status.p50", "<=", 1.2),
    ("loop p99 beside 8 jobs < 1 ms", "lateness:concurrent.p99_us", "<", 1000.0),
    ("loop max beside 8 jobs < 5 ms", "lateness:concurrent.max_us", "<", 5000.0),
    ("loop p99 while locked < 1 ms", "lateness:lock_run.p99_us", "<", 1000.0),
    ("loop max while locked < 5 ms", "lateness:lock_run.max_us", "<", 5000.0),
    ("RSS large - small <= 10 MB", "memory:delta_mb", "<=", 10.0),
)


# ---------------------------------------------------------------------------------------------
# Assembling


def _machine() -> dict[str, Any]:
    model = ""
    mem_total = ""
    with_cpuinfo = Path("/proc/cpuinfo")
    if with_cpuinfo.exists():
        for line in with_cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_total = line.split(":", 1)[1].strip()
                break
    return {
        "platform": platform.platform(),
        "cpu": model or platform.processor(),
        "cores": os.cpu_count(),
        "memory": mem_total,
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
    }


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _git() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=False
        ).stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def _lateness(samples: Sequence[float]) -> dict[str, float]:
    return {
        "beats": len(samples),
        "p50_us": micros(percentile(samples, 50)),
        "p99_us": micros(percentile(samples, 99)),
        "max_us": micros(max(samples)) if samples else math.nan,
        "over_1ms": sum(s > 0.001 for s in samples),
        "over_5ms": sum(s > 0.005 for s in samples),
    }


def assemble(
    rounds: dict[str, list[float]],
    pooled: dict[str, list[float]],
    extra: dict[str, Any],
    *,
    notes: list[str],
    sizes: dict[str, Any],
    mode: str,
    command: str,
    date: str,
    seconds: float,
) -> dict[str, Any]:
    """Everything about one run, as a JSON-able dict."""
    figures = {name: {"median": median(vals), "rounds": vals} for name, vals in rounds.items()}
    ratios: dict[str, dict[str, Any]] = {}
    for name, num, den in RATIOS:
        if num in rounds and den in rounds:
            per_round = [ratio(a, b) for a, b in zip(rounds[num], rounds[den], strict=True)]
            ratios[name] = {"median": median(per_round), "rounds": per_round}
    lateness = {name.removeprefix("lateness."): _lateness(vals) for name, vals in pooled.items()}
    memory: dict[str, Any] = {}
    if "memory.small" in extra and "memory.large" in extra:
        small, large = extra["memory.small"], extra["memory.large"]
        memory = {
            "small": small,
            "large": large,
            "delta_mb": (large["peak_rss_bytes"] - small["peak_rss_bytes"]) / 1e6,
        }
    results: dict[str, Any] = {
        "mode": mode,
        "command": command,
        "date": date,
        "seconds": seconds,
        "machine": _machine(),
        "versions": _versions(),
        "git": _git(),
        "sizes": sizes,
        "figures": figures,
        "ratios": ratios,
        "lateness": lateness,
        "memory": memory,
        "extra": {k: v for k, v in extra.items() if not k.startswith("memory.")},
        "notes": notes,
    }
    results["targets"] = judge(results)
    return results


def _lookup(results: dict[str, Any], key: str) -> float:
    kind, _, name = key.partition(":")
    if kind == "ratio":
        got = results["ratios"].get(name)
        return math.nan if got is None else float(got["median"])
    if kind == "lateness":
        where, _, stat = name.partition(".")
        return float(results["lateness"].get(where, {}).get(stat, math.nan))
    if kind == "memory":
        return float(results["memory"].get(name, math.nan))
    raise ValueError(key)


def judge(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with its measured value and PASS, MISS or SKIP (not measured)."""
    verdicts = []
    for target, key, op, threshold in TARGETS:
        value = _lookup(results, key)
        if math.isnan(value):
            verdict = "SKIP"
        elif op == ">=":
            verdict = "PASS" if value >= threshold else "MISS"
        elif op == "<=":
            verdict = "PASS" if value <= threshold else "MISS"
        else:
            verdict = "PASS" if value < threshold else "MISS"
        verdicts.append(
            {
                "target": target,
                "measured": value,
                "op": op,
                "threshold": threshold,
                "verdict": verdict,
                "by": value / threshold if threshold else math.nan,
            }
        )
    return verdicts


# ---------------------------------------------------------------------------------------------
# Rendering


def _n(value: float, digits: int = 0) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _x(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}x"


def render(results: dict[str, Any]) -> str:
    """The results as Markdown tables (readable on a terminal, pasteable into the README)."""
    fig = {k: v["median"] for k, v in results["figures"].items()}
    rat = {k: v["median"] for k, v in results["ratios"].items()}
    verdict = {t["target"]: t["verdict"] for t in results["targets"]}
    g = fig.get
    sizes = results["sizes"]
    m = results["machine"]
    hist = f"{sizes['history_rows']:,}"
    lines = [
        f"trio_batch benchmarks ({results['mode']}), {results['date']}: `{results['command']}`",
        f"machine: {m['cpu']}, {m['cores']} cores, {m['memory']}; Python {m['python']}, "
        f"SQLite {m['sqlite']}; {sizes['rounds']} interleaved rounds, medians; "
        f"{sizes['targets_per_job']} targets per job; no-op fetch; file DB, WAL + "
        "synchronous=NORMAL",
        "",
        "| throughput | targets/s | ratio | target | verdict |",
        "|---|---:|---:|---|---|",
        f"| floor: raw sqlite3, 1 commit per target | {_n(g('floor.targets_per_s', math.nan))} "
        "| 1.00x | | |",
        f"| serial: one job after another | {_n(g('serial.targets_per_s', math.nan))} "
        f"| {_x(rat.get('serial_vs_floor', math.nan))} floor | >= 0.5x "
        f"| {verdict['serial >= 0.5x floor']} |",
        f"| serial, traced (OpenTelemetry SDK, spans dropped) | "
        f"{_n(g('traced.serial.targets_per_s', math.nan))} "
        f"| {_x(rat.get('traced_vs_serial', math.nan))} untraced serial | | |",
        f"| serial, traced without store-call spans | "
        f"{_n(g('traced_no_store.serial.targets_per_s', math.nan))} "
        f"| {_x(rat.get('traced_no_store_vs_serial', math.nan))} untraced serial | | |",
        f"| concurrent: 8 jobs, 8 callers | {_n(g('concurrent.targets_per_s', math.nan))} "
        f"| {_x(rat.get('concurrent_vs_floor', math.nan))} floor | >= 1.0x "
        f"| {verdict['concurrent (8 jobs) >= 1.0x floor']} |",
        f"| concurrent, with 1 ms heartbeat | "
        f"{_n(g('concurrent_heartbeat.targets_per_s', math.nan))} "
        f"| {_x(rat.get('concurrent_heartbeat_vs_floor', math.nan))} floor | | |",
        f"| least trio code with the same guarantees (benchmarks/minimal.py), serial | "
        f"{_n(g('minimal.serial.targets_per_s', math.nan))} "
        f"| {_x(rat.get('minimal_serial_vs_floor', math.nan))} floor "
        f"(trio_batch: {_x(rat.get('serial_vs_minimal', math.nan))} of it) | | |",
        f"| least trio code with the same guarantees, 8 jobs | "
        f"{_n(g('minimal.concurrent.targets_per_s', math.nan))} "
        f"| {_x(rat.get('minimal_concurrent_vs_floor', math.nan))} floor "
        f"(trio_batch: {_x(rat.get('concurrent_vs_minimal', math.nan))} of it) | | |",
        f"| cycle (build targets, submit, wait), 1 caller | "
        f"{_n(g('cycle.serial.targets_per_s', math.nan))} "
        f"| {_x(rat.get('cycle_serial_vs_minimal', math.nan))} least code | >= 0.9x "
        f"| {verdict['cycle, 1 caller >= 0.9x least code']} |",
        f"| cycle (build targets, submit, wait), 8 callers | "
        f"{_n(g('cycle.concurrent.targets_per_s', math.nan))} "
        f"| {_x(rat.get('cycle_concurrent_vs_minimal', math.nan))} least code | >= 0.9x "
        f"| {verdict['cycle, 8 callers >= 0.9x least code']} |",
        f"| serial at {hist} history rows, lapsed half being purged | "
        f"{_n(g('history.serial.targets_per_s', math.nan))} "
        f"| {_x(rat.get('history_slowdown.serial', math.nan))} empty's time per target | <= 1.2x "
        f"| {verdict['serial at history <= 1.2x empty']} |",
        f"| serial at {hist} history rows, purge settled | "
        f"{_n(g('settled.serial.targets_per_s', math.nan))} "
        f"| {_x(rat.get('settled_slowdown.serial', math.nan))} empty's time per target | | |",
        "",
        "| latency (32-target job) | trio_batch p50 / p99 us | raw SQL p50 / p99 us "
        "| ratio p50 (p99) | target | verdict |",
        "|---|---:|---:|---:|---|---|",
    ]
    for call in ("submit", "status"):
        for prefix, label in (
            ("", "empty DB"),
            ("history.", f"{hist} rows, purging"),
            ("settled.", f"{hist} rows, purge settled"),
        ):
            cost = f"{_n(g(f'{prefix}{call}.p50_us', math.nan))} / "
            cost += _n(g(f"{prefix}{call}.p99_us", math.nan))
            raw = f"{_n(g(f'{prefix}raw_{call}.p50_us', math.nan))} / "
            raw += _n(g(f"{prefix}raw_{call}.p99_us", math.nan))
            r50 = rat.get(f"{prefix}{call}_vs_raw.p50", math.nan)
            r99 = rat.get(f"{prefix}{call}_vs_raw.p99", math.nan)
            if prefix == "history.":
                target = (
                    f"p50 <= 1.2x empty: {_x(rat.get(f'history_slowdown.{call}.p50', math.nan))}"
                )
                v = verdict[f"{call} p50 at history <= 1.2x empty"]
            elif prefix:
                target = f"(vs empty: {_x(rat.get(f'settled_slowdown.{call}.p50', math.nan))})"
                v = ""
            else:
                target = "p50 <= 2x raw"
                v = verdict[f"{call} p50 <= 2x raw SQL"]
            lines.append(
                f"| {call}, {label} | {cost} | {raw} | {_x(r50)} ({_x(r99)}) | {target} | {v} |"
            )
    late = results["lateness"]
    lines += [
        "",
        "| 1 ms heartbeat lateness (pooled over rounds) | beats | p50 us | p99 us | max us "
        "| > 1 ms | > 5 ms | target | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for key, label, p99_target, max_target in (
        ("idle", "beside an idle runner (the machine's own noise)", None, None),
        (
            "concurrent",
            "beside 8 concurrent jobs",
            "loop p99 beside 8 jobs < 1 ms",
            "loop max beside 8 jobs < 5 ms",
        ),
        (
            "lock_run",
            f"8 jobs, another process holds the lock {sizes['lock_hold_seconds']:g} s (whole run)",
            "loop p99 while locked < 1 ms",
            "loop max while locked < 5 ms",
        ),
        ("lock_held", "... only the beats while the lock was held", None, None),
    ):
        s = late.get(key)
        if s is None:
            continue
        v = "" if p99_target is None else f"{verdict[p99_target]} / {verdict[str(max_target)]}"
        t = "" if p99_target is None else "p99 < 1 ms, max < 5 ms"
        lines.append(
            f"| {label} | {s['beats']:,} | {_n(s['p50_us'])} | {_n(s['p99_us'])} "
            f"| {_n(s['max_us'])} | {s['over_1ms']:,} | {s['over_5ms']:,} | {t} | {v} |"
        )
    mem = results["memory"]
    if mem:
        lines += [
            "",
            "| memory (fresh process, serial jobs) | peak RSS MB | WAL file MB before close |",
            "|---|---:|---:|",
            f"| after {mem['small']['targets']:,} targets "
            f"| {mem['small']['peak_rss_bytes'] / 1e6:,.1f} "
            f"| {mem['small'].get('wal_bytes', math.nan) / 1e6:,.1f} |",
            f"| after {mem['large']['targets']:,} targets "
            f"| {mem['large']['peak_rss_bytes'] / 1e6:,.1f} "
            f"| {mem['large'].get('wal_bytes', math.nan) / 1e6:,.1f} |",
            f"| difference (target <= 10 MB) | {mem['delta_mb']:,.1f} "
            f"({verdict['RSS large - small <= 10 MB']}) | |",
        ]
    lines += [
        "",
        "| peer (WAL + synchronous=NORMAL) | items/s | trio_batch serial / peer "
        "| trio_batch 8 jobs / peer | least trio code: serial / peer, 8 jobs / peer "
        "| target | verdict |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for peer, label, targets in (
        (
            "huey",
            f"Huey {results['versions'].get('huey') or ''} SqliteHuey, 1-thread consumer",
            ("serial >= 2x Huey", "8 jobs >= 3x Huey"),
        ),
        (
            "dbos",
            f"DBOS {results['versions'].get('dbos') or ''}, SQLite, steps of 1 workflow",
            ("serial >= 20x DBOS",),
        ),
    ):
        if f"{peer}.items_per_s" not in fig:
            lines.append(f"| {label} | skipped (not installed) | | | | | SKIP |")
            continue
        lines.append(
            f"| {label} | {_n(fig[f'{peer}.items_per_s'])} "
            f"| {_x(rat.get(f'serial_vs_{peer}', math.nan))} "
            f"| {_x(rat.get(f'concurrent_vs_{peer}', math.nan))} "
            f"| {_x(rat.get(f'minimal_serial_vs_{peer}', math.nan))}, "
            f"{_x(rat.get(f'minimal_concurrent_vs_{peer}', math.nan))} "
            f"| {', '.join(targets)} | {' / '.join(verdict[t] for t in targets)} |"
        )
    passed = sum(t["verdict"] == "PASS" for t in results["targets"])
    judged = sum(t["verdict"] != "SKIP" for t in results["targets"])
    lines += ["", f"targets: {passed} of {judged} PASS"]
    for t in results["targets"]:
        lines.append(f"  {t['verdict']:4}  {t['target']:<38} measured {_n(t['measured'], 2)}")
    extra = results["extra"]
    if "lock.targets_during_hold" in fig:
        lines.append(
            f"lock: held {fig['lock.held_seconds']:.2f} s; "
            f"{_n(fig['lock.targets_during_hold'])} targets finished while held; "
            f"{_n(fig['lock.jobs_done'])} jobs per run, all done"
        )
    if "history.build_seconds" in extra:
        lines.append(f"history: {hist} rows built in {extra['history.build_seconds']:.1f} s")
    if "load_average.start" in extra:
        start, end = extra["load_average.start"], extra["load_average.end"]
        lines.append(
            f"machine load (1/5/15 min) at start {' '.join(f'{x:.2f}' for x in start)}, "
            f"at end {' '.join(f'{x:.2f}' for x in end)}: other work shares these 2 cores"
        )
    for note in results["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Writing


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj


def chart(results: dict[str, Any], path: Path) -> bool:
    """A log-scale bar chart of throughput per system; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig = {k: v["median"] for k, v in results["figures"].items()}
    hist = f"{results['sizes']['history_rows']:,}"
    bars = [
        ("raw sqlite3 floor", "floor.targets_per_s", "#888888"),
        ("trio_batch serial", "serial.targets_per_s", "#1f77b4"),
        ("trio_batch 8 jobs", "concurrent.targets_per_s", "#1f77b4"),
        ("least trio code, serial", "minimal.serial.targets_per_s", "#9467bd"),
        ("least trio code, 8 jobs", "minimal.concurrent.targets_per_s", "#9467bd"),
        (f"trio_batch serial, {hist} rows, purging", "history.serial.targets_per_s", "#6baed6"),
        (f"... {hist} rows, purge settled", "settled.serial.targets_per_s", "#6baed6"),
        ("Huey SqliteHuey", "huey.items_per_s", "#ff7f0e"),
        ("DBOS Transact", "dbos.items_per_s", "#2ca02c"),
    ]
    shown = [(label, fig[key], color) for label, key, color in bars if key in fig]
    figure, axes = plt.subplots(figsize=(7.5, 3.8), dpi=100)
    labels = [b[0] for b in shown][::-1]
    values = [b[1] for b in shown][::-1]
    axes.barh(labels, values, color=[b[2] for b in shown][::-1])
    axes.set_xscale("log")
    axes.set_xlim(min(values) / 2, max(values) * 4)
    for y, value in enumerate(values):
        axes.text(value * 1.08, y, f"{value:,.0f}/s", va="center", fontsize=8)
    axes.set_xlabel("items (targets, tasks, steps) per second, log scale")
    axes.set_title(
        f"No-op items/s, file DB, WAL + synchronous=NORMAL\n{results['date']}, "
        f"{results['command']}, medians of {results['sizes']['rounds']} rounds",
        fontsize=9,
    )
    axes.grid(axis="x", which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


def write(results: dict[str, Any], directory: Path, stem: str) -> list[Path]:
    """Write ``<stem>.json`` (and ``<stem>.png`` if matplotlib is there); return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"{stem}.json"
    json_path.write_text(json.dumps(_jsonable(results), indent=2) + "\n")
    written = [json_path]
    png = directory / f"{stem}.png"
    if chart(results, png):
        written.append(png)
    else:
        print("note: matplotlib is not installed: no chart", file=sys.stderr)
    return written


def _restore(obj: Any) -> Any:
    if obj is None:
        return math.nan
    if isinstance(obj, dict):
        return {k: _restore(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_restore(v) for v in obj]
    return obj


def main(argv: list[str]) -> None:
    results = json.loads(Path(argv[0]).read_text())
    results["figures"] = _restore(results["figures"])
    results["ratios"] = _restore(results["ratios"])
    print(render(results))


if __name__ == "__main__":
    main(sys.argv[1:])
