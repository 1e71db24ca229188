"""Where the PostgreSQL benchmark's processes run: ``--placement`` of
:mod:`benchmarks.postgres`.

A round trip between two processes costs several times as much when the client and the
server backend sit on different cores as when they share one (the wake-up crosses cores);
left to the scheduler, a round's floor lands in either mode, so its ratios swing between
rounds. Pinning every process of the run to one layout makes each round's floor and rows
comparable:

- ``free``: the scheduler's choice (what a deployment sees; the floor is bimodal);
- ``one-core``: the benchmark, its child runners, the server and PgBouncer all on one CPU
  (every row measures work per CPU: no row gains from a second core);
- ``two-cores``: the benchmark and its children on one CPU, the server and PgBouncer on
  another (every round trip crosses cores).

New server backends are forked by the postmaster, so they inherit its affinity.
"""

from __future__ import annotations

import os
from pathlib import Path

PLACEMENTS = ("free", "one-core", "two-cores")


def server_pids(data_dir: str) -> list[int]:
    """The postmaster's pid (the first line of ``postmaster.pid``) and its children's."""
    postmaster = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children")
    return [postmaster, *map(int, children.read_text().split())]


def place(placement: str, *, data_dir: str, pooler_pid: int | None) -> str:
    """Pin this process, the server and the pooler as ``placement`` says; a line saying how.

    ``free`` pins nothing. On a machine with one CPU the layouts cannot be made and nothing
    is pinned either: the line says so.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}")
    cpus = sorted(os.sched_getaffinity(0))
    if placement == "free":
        return "placement: free (the scheduler's)"
    if len(cpus) < 2:
        return f"placement: free ({placement} needs two CPUs; this process may use one)"
    client = {cpus[0]}
    server = client if placement == "one-core" else {cpus[1]}
    os.sched_setaffinity(0, client)
    for pid in [*server_pids(data_dir), *([pooler_pid] if pooler_pid else [])]:
        os.sched_setaffinity(pid, server)
    return f"placement: {placement} (client on CPU {cpus[0]}, server on CPU {min(server)})"
