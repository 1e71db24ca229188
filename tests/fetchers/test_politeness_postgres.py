"""Per-host limits on PostgreSQL hold across runners: the concurrency cap, the 429 pause, and a
killed runner's slots expiring. Two runners (each its own store and fetcher) on one database,
against one real HTTPS server that counts what it sees."""

from __future__ import annotations

import signal
import ssl
import subprocess
import sys
import urllib.parse
from typing import Any

import psycopg
import pytest
import trio

from trio_batch import Config, JobState, Target, open_runner
from trio_batch.fetchers import FetchError, HttpFetcher
from trio_batch.fetchers._hosts import Hosts, Politeness
from trio_batch.store.postgres import PostgresJobStore

from ..support.cuttable_proxy import CuttableProxy
from ..support.pg_server import PgServer
from ..support.tls_server import (
    TLSServer,
    client_tls,
    loopback_names,
    tls_ca,
    tls_server,
    until,
)
from .test_politeness import figures

__all__ = ["client_tls", "tls_ca", "tls_server"]  # fixtures


def _sql(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


async def test_per_host_concurrency_holds_across_two_runners(
    pg_dsn: str, tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    fetchers = [
        HttpFetcher(verify=client_tls, trust_env=False, per_host_concurrency=2) for _ in "ab"
    ]
    stores = [PostgresJobStore.open(pg_dsn) for _ in "ab"]
    async with (
        open_runner(stores[0], fetchers[0], Config(jobs_total=9)) as a,
        open_runner(stores[1], fetchers[1], Config(jobs_total=9)) as b,
    ):
        ids = [
            (
                runner,
                (await runner.submit(f"c{j}", "user", [Target(tls_server.url(f"/hold?j={j}"))]))[0],
            )
            for j, runner in enumerate([a, b] * 3)
        ]
        await until(lambda: tls_server.now_in_flight("localhost") == 2)
        # Each runner's own cap (2) would let four through: the shared one holds the others.
        await until(lambda: sum(figures(f, "localhost").get("waiting", 0) for f in fetchers) == 4)
        assert tls_server.now_in_flight("localhost") == 2
        tls_server.release.set()
        done = [await runner.wait(job_id) for runner, job_id in ids]
    assert all(job is not None and job.status is JobState.DONE for job in done)
    assert tls_server.most_in_flight["localhost"] == 2
    assert tls_server.count("/hold?j=5") == 1
    assert _sql(pg_dsn, "SELECT count(*) FROM host_slots") == [(0,)]  # every slot given back
    for store in stores:
        await store.aclose()


async def test_a_429_seen_by_one_runner_pauses_the_others_on_that_host_only(
    pg_dsn: str, tls_server: TLSServer, client_tls: ssl.SSLContext
) -> None:
    fetchers = [
        HttpFetcher(
            verify=client_tls, trust_env=False, max_host_pause=600, check_url=loopback_names()
        )
        for _ in "ab"
    ]
    stores = [PostgresJobStore.open(pg_dsn) for _ in "ab"]
    async with (
        open_runner(stores[0], fetchers[0]) as a,
        open_runner(stores[1], fetchers[1]) as b,
    ):
        await a.submit("t", "user", [Target(tls_server.url("/throttle?after=300&times=1"))])
        await until(lambda: figures(fetchers[0], "localhost").get("throttled") == 1)
        paused = "SELECT paused_until - extract(epoch FROM now()) FROM host_state WHERE host = %s"
        await until(lambda: bool(_sql(pg_dsn, paused, ("localhost",))))
        assert _sql(pg_dsn, paused, ("localhost",))[0][0] > 200
        await b.submit("s", "user", [Target(tls_server.url("/page?n=s"))])
        other, _ = await b.submit("o", "user", [Target(tls_server.url("/page?n=o", "a.test"))])
        job = await b.wait(other)
        assert job is not None and job.status is JobState.DONE
        await until(lambda: figures(fetchers[1], "localhost").get("waiting") == 1)
        assert tls_server.count("/page?n=s") == 0  # runner B never had a 429 itself
        # Leaving the runners cancels the waits: no slot is left held.
    assert tls_server.count("/page?n=s") == 0
    assert _sql(pg_dsn, "SELECT count(*) FROM host_slots") == [(0,)]
    for store in stores:
        await store.aclose()


_HOLDER = """
import sys, trio
from trio_batch.store.postgres import PostgresJobStore

async def main():
    store = PostgresJobStore.open(sys.argv[1])
    assert await store.acquire_host_slot("h.test", "dead", cap=1, rate=None, lease=2) is None
    print("held", flush=True)
    await trio.sleep_forever()

trio.run(main)
"""


async def test_a_killed_runners_slot_expires_with_its_lease(pg_dsn: str) -> None:
    holder = await trio.lowlevel.open_process(
        [sys.executable, "-c", _HOLDER, pg_dsn], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        said = b""
        while not said.endswith(b"\n") and (chunk := await holder.stdout.receive_some()):
            said += chunk
        assert said == b"held\n"
    finally:
        holder.send_signal(signal.SIGKILL)
        await holder.wait()
    # Killed without giving it back: the slot is still there...
    assert _sql(pg_dsn, "SELECT id FROM host_slots") == [("dead",)]
    store = PostgresJobStore.open(pg_dsn)
    got: list[float | None] = []

    async def take() -> bool:
        got.append(await store.acquire_host_slot("h.test", "mine", cap=1, rate=None, lease=60))
        return got[-1] is None

    # ...until its lease lapses: then the cap of 1 lets the next holder in.
    with trio.fail_after(60):
        while True:
            if await take():
                break
            await trio.sleep(0.1)
    assert _sql(pg_dsn, "SELECT id FROM host_slots") == [("mine",)]
    await store.release_host_slot("mine")
    assert _sql(pg_dsn, "SELECT count(*) FROM host_slots") == [(0,)]
    await store.aclose()


async def test_shared_slots_pauses_and_rate_work_through_a_transaction_pooler(
    pooled_dsn: str,
) -> None:
    a, b = PostgresJobStore.open(pooled_dsn), PostgresJobStore.open(pooled_dsn)
    try:
        assert await a.acquire_host_slot("p.test", "a1", cap=1, rate=None, lease=60) is None
        assert await b.acquire_host_slot("p.test", "b1", cap=1, rate=None, lease=60) == 0.0
        assert await b.acquire_host_slot("q.test", "b2", cap=1, rate=None, lease=60) is None
        await a.release_host_slot("a1")
        assert await b.acquire_host_slot("p.test", "b1", cap=1, rate=None, lease=60) is None
        await a.pause_host("p.test", 300)
        await b.pause_host("p.test", 1)  # a shorter pause never cuts a longer one
        wait = await a.acquire_host_slot("p.test", "a2", cap=5, rate=None, lease=60)
        assert wait is not None and wait > 200
        # The rate's next start is shared too: one start per 100 s across both stores.
        assert await a.acquire_host_slot("r.test", "a3", cap=5, rate=0.01, lease=60) is None
        wait = await b.acquire_host_slot("r.test", "b3", cap=5, rate=0.01, lease=60)
        assert wait is not None and wait > 50
    finally:
        await a.aclose()
        await b.aclose()


async def test_an_unreachable_database_fails_the_request_retryably_instead_of_hanging(
    pg_server: PgServer, pg_dsn: str
) -> None:
    with CuttableProxy(f"{pg_server.socket_dir}/.s.PGSQL.5432") as proxy:
        dbname = urllib.parse.urlsplit(pg_dsn).path.lstrip("/")
        store = PostgresJobStore.open(
            f"postgresql://postgres@127.0.0.1:{proxy.port}/{dbname}", store_timeout=1.0
        )
        hosts = Hosts(Politeness(concurrency=2), shared=store)
        try:
            async with hosts.slot("h.test"):
                pass  # reachable: a slot taken and given back
            proxy.hold()  # a partition: only the store's deadline notices
            with pytest.raises(FetchError) as caught:
                async with hosts.slot("h.test"):
                    raise AssertionError("no slot without the shared limits")
            assert caught.value.retryable and "per-host limits" in str(caught.value)
            assert hosts.figures()[0].in_flight == 0 and hosts.figures()[0].waiting == 0
        finally:
            proxy.release()
            await store.aclose()


async def test_the_purge_drops_lapsed_host_slots_and_idle_hosts_only(pg_dsn: str) -> None:
    store = PostgresJobStore.open(pg_dsn)
    try:
        # Two hosts' rows: one left by a dead runner (lease and pause over), one still live.
        assert (
            await store.acquire_host_slot("live.test", "kept", cap=1, rate=None, lease=600) is None
        )
        await store.pause_host("live.test", 600)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO host_slots VALUES ('dead', 'gone.test', 'x', 1)")
            conn.execute("INSERT INTO host_state VALUES ('gone.test', 1, 1)")
        await store.purge_expired(now=0, batch_size=10)
        assert _sql(pg_dsn, "SELECT id FROM host_slots") == [("kept",)]
        assert _sql(pg_dsn, "SELECT host FROM host_state") == [("live.test",)]
    finally:
        await store.aclose()
