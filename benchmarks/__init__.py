"""The trio_batch benchmarks: ``make bench`` (full) and ``make bench-quick`` (reduced).

Each module measures trio_batch beside the plain program it is judged against, in the same
run, in interleaved rounds, and prints medians and ratios with the machine and the version:
:mod:`benchmarks.latency` (near the latency bound, and a fetch that does nothing),
:mod:`benchmarks.fetch` (the real fetch path), :mod:`benchmarks.open_load` (loop lag) and
:mod:`benchmarks.worker_fairness` (a quiet caller's target beside busy callers' processing).
docs/explanation/performance.md reads the latest table.
"""
