"""The package and the commands that only read the database start without the modules they do
not use: the PostgreSQL driver, OpenTelemetry, the HTTP service, the fetchers and their
parsers load when a command needs them, not at every start."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from trio_batch import Store, Target
from trio_batch.store import NewJob

#: Top-level modules (and trio_batch's own heavy parts) a start must not load.
HEAVY = [
    "psycopg",
    "opentelemetry",
    "starlette",
    "hypercorn",
    "warcio",
    "selectolax",
    "pypdf",
    "jq",
    "trafilatura",
    "httpx",
    "trio_parallel",
    "trio_batch.fetchers",
    "trio_batch.http",
    "trio_batch.store.postgres",
]

_PROGRAM = textwrap.dedent(
    """
    import json, sys

    def loaded():
        return sorted(
            name for name in sys.argv[3:]
            if any(m == name or m.startswith(name + ".") for m in sys.modules)
        )

    seen = {}
    import trio_batch
    seen["import trio_batch"] = loaded() + (["rich"] if "rich" in sys.modules else [])
    from trio_batch.cli import main
    seen["import trio_batch.cli"] = loaded()
    job_id = sys.argv[2]
    for command in (["jobs"], ["status", job_id], ["results", job_id], ["export", job_id]):
        code = main([*command, "--db", sys.argv[1]])
        assert code == 0, (command, code)
        seen["trio-batch " + command[0]] = loaded()
    print(json.dumps(seen))
    """
)


def test_importing_and_reading_commands_load_no_heavy_module(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    with Store.open(db) as store:
        new = NewJob("me", "cli", [Target("https://example.test/")], 3600, 1, 1, 1)
        job_id = store.create_job(new)[0].id
    # A fresh interpreter: this test process has imported all of them already.
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, str(db), job_id, *HEAVY],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])  # after what the commands print
    assert seen == {
        "import trio_batch": [],
        "import trio_batch.cli": [],
        "trio-batch jobs": [],
        "trio-batch status": [],
        "trio-batch results": [],
        "trio-batch export": [],
    }
