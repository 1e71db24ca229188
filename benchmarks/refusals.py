"""CPU per refused submit: ``python -m benchmarks.refusals`` prints refusals per CPU second.

Every job slot is taken (8 callers each hold a job whose fetch never returns), then one task
submits, in turn, a job for 200 other callers (refused with ``Busy``) and one for a caller
already holding a job (``CallerBusy``): ``REFUSALS`` refusals, timed with the process's CPU
clock, as under the soak load, where 9 submits in 10 are refused. Each caller's targets are
built once, as a client retrying the same request does.

Public API only, so :mod:`benchmarks.ab` runs this file of this tree against the code of
another commit too (``python -m benchmarks.ab BASE refusal``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import trio

from trio_batch import Busy, CallerBusy, Config, Result, Store, Target, open_runner

REFUSALS = 4800
CALLERS = 200


async def _refusals_per_cpu_second(path: str) -> float:
    release = trio.Event()

    async def fetch(target: Target) -> Result:
        await release.wait()
        return Result("")

    with Store.open(path) as store:
        async with open_runner(store, fetch, Config()) as runner:
            for k in range(runner.config.jobs_total):
                await runner.submit(f"holder{k}", "user", [Target(f"https://r.test/h/{k}")])
            requests = [
                (f"caller{k}", [Target(f"https://r.test/{k}/{i}") for i in range(1 + k % 4)])
                for k in range(CALLERS)
            ]
            requests.append(("holder0", [Target("https://r.test/h/again")]))
            refused = 0
            began = time.process_time()
            while refused < REFUSALS:
                for caller, targets in requests:
                    try:
                        await runner.submit(caller, "user", targets)
                    except (Busy, CallerBusy):
                        refused += 1
                    else:
                        raise AssertionError("a submit was accepted with every slot taken")
            spent = time.process_time() - began
            release.set()
    return refused / spent


def rate(path: str) -> float:
    """Refusals per CPU second, on a fresh file database at ``path``."""
    return trio.run(_refusals_per_cpu_second, path)


def main() -> None:
    """Print refusals per CPU second (and the CPU per refusal, on stderr)."""
    with tempfile.TemporaryDirectory(prefix="trio-batch-refusals-") as scratch:
        per_s = rate(os.path.join(scratch, "refusals.db"))
    print(f"{1e6 / per_s:.1f} us per refusal", file=sys.stderr)
    print(per_s)


if __name__ == "__main__":
    main()
