"""The trio_batch benchmark harness: ``make bench`` (full) and ``make bench-quick`` (reduced).

Every figure is measured side by side in one run, in interleaved rounds, and reported as the
median of those rounds together with its ratio to the reference it is judged against. See
``benchmarks/run.py`` for the command line and the README's ``## Benchmarks`` section for the
latest table.
"""
