"""Keep the PostgreSQL benchmark rows from rotting: each measurement at a tiny size.

No timing is asserted: only that each runs end to end on the test server and reports a figure.
"""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from benchmarks import minimal_postgres, placement, postgres, workloads

from .support.pg_server import PgServer
from .support.pgbouncer import PgBouncer

# every benchmark here drives PostgreSQL, some on a server of its own: left out of make test-fast.
pytestmark = pytest.mark.postgres


def test_each_postgres_row_runs(pg_server: PgServer) -> None:
    def url() -> str:
        return postgres.fresh_database(pg_server)

    assert postgres.floor_throughput(url(), targets=5, targets_per_job=2) > 0
    assert workloads.measure_serial(url(), jobs=2, targets_per_job=3) > 0
    got = workloads.measure_concurrent(url(), jobs_per_caller=1, targets_per_job=2, callers=2)
    assert got.targets_per_s > 0
    assert postgres.two_runners_throughput(url(), jobs_per_caller=1, targets_per_job=2) > 0
    assert workloads.measure_cycle(url(), callers=2, jobs_per_caller=2, targets_per_job=3) > 0
    bare = url()
    assert minimal_postgres.measure(bare, callers=2, jobs=2, targets_per_job=3) > 0
    with psycopg.connect(bare) as conn:  # the bare loop stored every outcome, as the runner does
        jobs = conn.execute("SELECT status, targets_done, count(*) FROM jobs GROUP BY 1, 2")
        assert jobs.fetchall() == [("done", 3, 4)]
        targets = conn.execute("SELECT status, count(*) FROM targets GROUP BY 1").fetchall()
        assert targets == [("done", 12)]
    table = postgres.render(
        {"floor": [1.0, 2.0], "cycle, 1 caller": [0.5, 1.0], "bare loop, 1 caller": [1.0, 1.0]}
    )
    assert "0.50x floor" in table and "0.75x the bare loop" in table


def test_the_bare_loop_runs_through_pgbouncer(pooled_dsn: str) -> None:
    # No statement prepared: a pooler in transaction mode would lose it between transactions.
    assert minimal_postgres.measure(pooled_dsn, callers=2, jobs=3, targets_per_job=6, pooled=True)
    with psycopg.connect(pooled_dsn, prepare_threshold=None) as conn:
        targets = conn.execute("SELECT status, count(*) FROM targets GROUP BY 1").fetchall()
        assert targets == [("done", 36)]


def test_each_row_is_set_beside_a_bare_loop_that_is_measured(pgbouncer: PgBouncer) -> None:
    names = [
        name for name, _ in postgres.steps(pgbouncer, floor_targets=1, serial_jobs=1, per_caller=1)
    ]
    assert len(names) == len(set(names)) and names[0] == "floor"
    assert set(postgres.BARE_LOOP_OF) <= set(names) >= set(postgres.BARE_LOOP_OF.values())
    table = postgres.render(
        {
            "floor": [1.0],
            "serial, through PgBouncer": [0.4],
            "bare loop, 1 caller, through PgBouncer": [0.8],
        }
    )
    assert "0.40x floor   0.50x the bare loop" in table


def test_a_bimodal_floor_is_reported_with_the_ratios_to_its_fast_mode() -> None:
    assert postgres.fast_rounds([2000.0, 2100.0, 1900.0]) is None
    floor = [2000.0, 4400.0, 1800.0, 4000.0, 2100.0]
    assert postgres.fast_rounds(floor) == [1, 3]
    table = postgres.render({"floor": floor, "serial": [1800.0, 2200.0, 1800.0, 2000.0, 2100.0]})
    assert "two modes: 3 rounds 1800-2100, 2 rounds 4000-4400" in table
    assert "0.90x floor   0.50x fast floor" in table


def test_a_placement_pins_the_client_and_the_server(pg_server: PgServer) -> None:
    # In a child, so this process keeps its CPUs; the server gets its own back after.
    script = (
        "import os, sys; from benchmarks.placement import place; "
        "print(place(sys.argv[1], data_dir=sys.argv[2], pooler_pid=None)); "
        "print(sorted(os.sched_getaffinity(0)))"
    )
    cpus = sorted(os.sched_getaffinity(0))
    server = placement.server_pids(pg_server.data_dir)
    try:
        for layout, client_cpu, server_cpu in [("one-core", 0, 0), ("two-cores", 0, 1)]:
            out = subprocess.run(
                [sys.executable, "-c", script, layout, pg_server.data_dir],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()
            if len(cpus) < 2:
                assert "needs two CPUs" in out[0]
                continue
            assert out[1] == str([cpus[client_cpu]])
            assert os.sched_getaffinity(server[0]) == {cpus[server_cpu]}
            with psycopg.connect(pg_server.dsn()) as conn:  # a new backend inherits it
                pid = conn.execute("SELECT pg_backend_pid()").fetchone()
                assert pid is not None and os.sched_getaffinity(pid[0]) == {cpus[server_cpu]}
    finally:
        for pid in placement.server_pids(pg_server.data_dir):
            os.sched_setaffinity(pid, cpus)
    with pytest.raises(ValueError, match="placement must be one of"):
        placement.place("everywhere", data_dir=pg_server.data_dir, pooler_pid=None)


def test_the_submit_probe_runs() -> None:
    # Its own throw-away server (pg_stat_statements loaded); both rows, at a tiny size.
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.postgres_submit", "--calls", "3", "--targets", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = [line.split()[0] for line in done.stdout.splitlines()]
    assert rows == ["created", "refused"], done.stdout
