"""``make demo``: a real batch through ``trio-batch run`` against a local fixture server.

1. Serves demo/site/ on 127.0.0.1 (a free port) from a background thread.
2. Writes a batch of 12 targets, with grep, jq, text and PDF options, into a fresh temporary
   folder, and runs ``trio-batch run`` on it: live progress, then the results table.
3. Runs the same batch again: the stored job is reused and nothing is fetched.
4. Stops the server. The database stays in the temporary folder for you to explore.

Works offline; nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import DemoServer

TRIO_BATCH = str(Path(sys.executable).parent / "trio-batch")


def batch(base: str) -> list[dict[str, Any]]:
    """The demo's targets: every option the built-in fetcher has, and two failures at fetch
    time (an option that cannot work at all, such as ``question``, is refused at submit)."""
    page, api = f"{base}/index.html", f"{base}/api/status.json"
    return [
        {"url": page},
        {"url": page, "options": {"mode": "text"}},
        {"url": page, "options": {"mode": "text", "grep": "(?i)lamp", "context": True}},
        {"url": f"{base}/docs.html", "options": {"mode": "text", "grep": "foghorn|long"}},
        {"url": api, "options": {"jq": ".version"}},
        {"url": api, "options": {"jq": '.lights[] | select(.up | not) | .name + " is dark"'}},
        {"url": f"{base}/changelog.txt", "options": {"grep": "^## "}},
        {"url": f"{base}/report.pdf", "options": {"pages": "2", "grep": "Total"}},
        {"url": f"{base}/slow"},
        {"url": f"{base}/old-news", "options": {"mode": "text", "grep": "inspection"}},
        {"url": f"{base}/no-such-page.html"},
        {"url": page, "options": {"jq": ".version"}},  # an HTML page: not JSON
    ]


def step(title: str, command: list[str] | None = None) -> None:
    bold, plain = ("\033[1m", "\033[0m") if sys.stdout.isatty() else ("", "")
    print(f"\n{bold}== {title}{plain}", flush=True)
    if command is not None:
        shown = ["trio-batch", *command[1:]]
        print(f"$ {shlex.join(shown)}", flush=True)


def main(argv: list[str]) -> int:
    """Run the demo; ``argv`` may name the folder for the database (default: a new temp one)."""
    if argv:
        workdir = Path(argv[0])
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="trio-batch-demo-"))
    db = workdir / "demo.db"
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    server = DemoServer().start()
    try:
        targets = batch(server.base)
        batch_file = workdir / "batch.jsonl"
        batch_file.write_text("".join(json.dumps(t) + "\n" for t in targets))
        step(f"fixture pages served on {server.base}; batch of {len(targets)} targets:")
        print(batch_file.read_text().replace(server.base, "$BASE"), end="")

        run = [TRIO_BATCH, "run", str(batch_file), "--db", str(db)]
        step("run the batch (two targets fail on purpose: a 404 and jq on an HTML page)", run)
        started = time.monotonic()
        first = subprocess.run(run, env=env, check=False)
        took = time.monotonic() - started
        print(f"(exit code {first.returncode}: 1 means the job ended partial; took {took:.1f} s)")
        if first.returncode not in (0, 1):
            return first.returncode

        step("run the same batch again: the stored job is reused, nothing is fetched", run)
        started = time.monotonic()
        again = subprocess.run(run, env=env, check=False)
        print(f"(exit code {again.returncode}; took {time.monotonic() - started:.1f} s)")

        jobs = [TRIO_BATCH, "jobs", "--db", str(db)]
        step("the jobs in the demo database", jobs)
        subprocess.run(jobs, env=env, check=False)
    finally:
        server.stop()
    step("done; the server is stopped")
    print(f"The database is kept in {workdir}. Try:")
    print(f"  .venv/bin/trio-batch jobs --db {shlex.quote(str(db))}")
    print(f"  .venv/bin/trio-batch results JOB --db {shlex.quote(str(db))}")
    return 0 if first.returncode in (0, 1) and again.returncode == first.returncode else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
