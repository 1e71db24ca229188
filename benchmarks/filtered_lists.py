"""A caller's filtered job lists at scale: ``python -m benchmarks.filtered_lists``.

Fills a SQLite file with ``--jobs`` jobs (default 1,000,000) of a few callers, each with two
labels, made through the store's own schema (rows inserted in bulk, as the store writes them),
then times one page (``limit`` 20, and the next page after it) of
``list_caller_jobs`` per filter: none, a status, two statuses, a label, a label and a status,
two labels, created_after. The same reads on a database of ``--small`` jobs (default 100,000)
run in the same process, so the ratio says how the cost grows with the table (an indexed read
grows with log n; a scan would grow 10-fold).

Medians of ``--rounds`` reads, interleaved; the machine is shared, so read the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from trio_batch import JobState, Store
from trio_batch.store import JobFilter
from trio_batch.store.sqlite import _queries as q

CALLERS = ("alice", "bob", "carol", "dave")
STATUSES = ("done", "done", "partial", "failed", "cancelled")  # 5: coprime with 4 callers


def fill(path: Path, jobs: int) -> None:
    """``jobs`` jobs, spread over CALLERS, statuses, 49 'run' and 3 'team' labels (counts
    coprime with the callers', so every filter below matches some of each caller's jobs),
    one second apart."""
    with Store.open(path) as store:
        conn = store.db.conn
        batch = 20_000
        for start in range(0, jobs, batch):
            job_rows = []
            label_rows = []
            for i in range(start, min(start + batch, jobs)):
                job_id = f"{i:022d}"
                caller = CALLERS[i % len(CALLERS)]
                status = "running" if i >= jobs - 4 else STATUSES[i % len(STATUSES)]
                created = 1_700_000_000.0 + i
                meta = f'{{"run":"r{i % 49}","team":"t{i % 3}"}}'
                job_rows.append(
                    (
                        job_id,
                        status,
                        None,
                        1,
                        1,
                        0,
                        caller,
                        "user",
                        f"k{i}",
                        created,
                        created,
                        4_000_000_000.0,
                        meta,
                        None,
                        None,
                    )
                )
                label_rows.append((job_id, caller, "run", f"r{i % 49}", created))
                label_rows.append((job_id, caller, "team", f"t{i % 3}", created))
            with store.transaction():
                conn.executemany(q.INSERT_JOB, job_rows)
                conn.executemany(q.INSERT_LABEL, label_rows)
        conn.execute("ANALYZE")


FILTERS = {
    "none": JobFilter(),
    "status": JobFilter(statuses=frozenset({JobState.PARTIAL})),
    "2 statuses": JobFilter(statuses=frozenset({JobState.FAILED, JobState.CANCELLED})),
    "label": JobFilter(labels=(("run", "r7"),)),
    "label+status": JobFilter(statuses=frozenset({JobState.DONE}), labels=(("run", "r7"),)),
    "2 labels": JobFilter(labels=(("run", "r7"), ("team", "t1"))),
    "created_after": JobFilter(created_after=1_700_000_000.0 + 1000),
    "label, old jobs": JobFilter(labels=(("run", "r7"),), created_after=1_700_000_000.0),
}


def page_us(store: Store, where: JobFilter) -> float:
    """Microseconds to read one full page of 20 and the next one after it."""
    began = time.perf_counter()
    page = store.list_caller_jobs("carol", now=1.0, limit=20, where=where)
    assert len(page) == 20 and all(where.matches(job) for job in page), where
    store.list_caller_jobs(
        "carol", now=1.0, limit=20, before=(page[-1].created_at, page[-1].id), where=where
    )
    return (time.perf_counter() - began) * 1e6 / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=51)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big.db", Path(tmp) / "small.db"
        began = time.perf_counter()
        fill(big, args.jobs)
        fill(small, args.small)
        print(
            f"filled {args.jobs:,} and {args.small:,} jobs in {time.perf_counter() - began:.0f} s"
        )
        with Store.open(big) as b, Store.open(small) as s:
            times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in FILTERS}
            for _ in range(args.rounds):
                for name, where in FILTERS.items():
                    times[name][0].append(page_us(b, where))
                    times[name][1].append(page_us(s, where))
        print(f"{'filter':<14} {args.jobs:>10,} jobs {args.small:>8,} jobs  ratio  (us per page)")
        for name, (big_t, small_t) in times.items():
            mb, ms = statistics.median(big_t), statistics.median(small_t)
            print(f"{name:<14} {mb:>15.0f} {ms:>13.0f} {mb / ms:>6.2f}")


if __name__ == "__main__":
    main()
