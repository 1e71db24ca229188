"""Keep the PostgreSQL benchmark rows from rotting: each measurement at a tiny size.

No timing is asserted: only that each runs end to end on the test server and reports a figure.
"""

from __future__ import annotations

from benchmarks import postgres, workloads

from .support.pg_server import PgServer


def test_each_postgres_row_runs(pg_server: PgServer) -> None:
    def url() -> str:
        return postgres.fresh_database(pg_server)

    assert postgres.floor_throughput(url(), targets=5, targets_per_job=2) > 0
    assert workloads.measure_serial(url(), jobs=2, targets_per_job=3) > 0
    got = workloads.measure_concurrent(url(), jobs_per_caller=1, targets_per_job=2, callers=2)
    assert got.targets_per_s > 0
    assert postgres.two_runners_throughput(url(), jobs_per_caller=1, targets_per_job=2) > 0
    table = postgres.render({"floor": [1.0, 2.0], "serial": [0.5, 1.0]})
    assert "serial" in table and "0.50x floor" in table
