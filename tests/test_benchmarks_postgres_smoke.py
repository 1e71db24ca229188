"""Keep the PostgreSQL benchmark rows from rotting: each measurement at a tiny size.

No timing is asserted: only that each runs end to end on the test server and reports a figure.
"""

from __future__ import annotations

import psycopg

from benchmarks import minimal_postgres, postgres, workloads

from .support.pg_server import PgServer


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
