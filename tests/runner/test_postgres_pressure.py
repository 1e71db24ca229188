"""A runner under the pressures a production PostgreSQL puts on it, against the real server.

Each test drives the load of ``benchmarks.pg_pressure`` (callers each submitting a job of
four 2 ms targets and waiting for it, over and over) while the pressure lasts: its backends
killed in a loop, an idle transaction holding the xmin, ``max_connections`` filled by a hog,
and all of it through PgBouncer (whose log is checked by ``pooled_dsn``). Each then ends the
runner cleanly and checks the store: no job left live, ``targets_done`` equal to the stored
outcomes, every ``done`` job with every target done, every job a caller saw end stored with
that status, and every error a caller was given a typed one. Nothing here is timed: the
pressures and the load are bounded by counts (kill rounds, jobs completed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import psycopg
import trio

from benchmarks.pg_pressure import (
    STORE_TIMEOUT,
    Hog,
    Killer,
    Load,
    applied,
    held_xmin,
    pressure_config,
    sleepy_fetch,
    store_problems,
)
from trio_batch import StoreUnavailable, open_runner, open_store

from ..support.pgbouncer import PgBouncer, log_size, not_linked


def _run(dsn: str, scenario: Callable[[Load], Awaitable[None]]) -> Load:
    """Run ``scenario(load)`` with the load going, then stop the load and the runner (a
    clean exit); the load once it has ended."""

    async def main() -> Load:
        store = open_store(dsn, store_timeout=STORE_TIMEOUT)
        try:
            async with open_runner(store, sleepy_fetch, pressure_config()) as runner:
                load = Load(runner)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(load.run)
                    try:
                        await scenario(load)
                    finally:
                        load.stop()
        finally:
            await store.aclose()
        return load

    return trio.run(main)


def _checked(dsn: str, load: Load) -> None:
    assert load.seen, "no job ended"
    assert store_problems(dsn, load.seen) == []
    assert all(isinstance(exc, StoreUnavailable) for exc in load.errors), load.errors[:3]


def test_jobs_complete_while_the_runners_backends_are_killed_in_a_loop(pg_dsn: str) -> None:
    killer = Killer(pg_dsn, interval=0.5)

    async def scenario(load: Load) -> None:
        await load.until(lambda: len(load.completions) >= 50)
        async with applied(killer):
            # Jobs keep completing between kills: after the third round that killed a
            # backend, and again after the sixth (the runner reconnects each time).
            for rounds in (3, 6):
                await trio.to_thread.run_sync(killer.wait_rounds, rounds)
                seen = len(load.completions)
                await load.until(lambda: len(load.completions) > seen + 16)  # noqa: B023

    load = _run(pg_dsn, scenario)
    assert killer.kills >= 6
    _checked(pg_dsn, load)


def test_jobs_complete_while_an_idle_transaction_holds_the_xmin(pg_dsn: str) -> None:
    async def scenario(load: Load) -> None:
        await load.until(lambda: len(load.completions) >= 50)
        with held_xmin(pg_dsn):
            start = len(load.completions)
            await load.until(lambda: len(load.completions) >= start + 500)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # What the caps count agrees with the jobs themselves, versions kept or not.
            live = conn.execute(
                "SELECT (SELECT count(*) FROM live_jobs), "
                "(SELECT count(*) FROM jobs WHERE status IN ('queued', 'running'))"
            ).fetchone()
        assert live is not None and live[0] == live[1]

    _checked(pg_dsn, _run(pg_dsn, scenario))


def test_a_runner_rides_out_a_server_whose_connections_are_all_taken(pg_dsn: str) -> None:
    hog = Hog(pg_dsn, interval=0.2)

    async def scenario(load: Load) -> None:
        await load.until(lambda: len(load.completions) >= 50)
        async with applied(hog):
            # The server full for three rounds, the runner cut off whenever it got a slot.
            await trio.to_thread.run_sync(hog.wait_rounds, 3)
        assert hog.kills >= 1  # the runner's connections, cut as the hog filled the server
        recovered = len(load.completions)
        await load.until(lambda: len(load.completions) >= recovered + 100)

    _checked(pg_dsn, _run(pg_dsn, scenario))


def test_a_runner_behind_pgbouncer_under_load_sends_no_listen(
    pooled_dsn: str, pg_dsn: str, pgbouncer: PgBouncer
) -> None:
    since = log_size(pgbouncer)

    async def scenario(load: Load) -> None:
        await load.until(lambda: len(load.completions) >= 300)

    load = _run(pooled_dsn, scenario)
    _checked(pg_dsn, load)
    assert not_linked(pgbouncer, since) == []
