"""``make demo-cluster``: two ``trio-batch serve`` processes sharing one PostgreSQL database.

1. Starts a throw-away local PostgreSQL server (demo/local_postgres.py; Unix socket only).
2. Serves the fixture pages of demo/site/ on 127.0.0.1 (demo/serve.py; ``/slow`` takes 1.5 s).
3. Starts two ``trio-batch serve --db postgresql://...`` processes, A and B, on two free
   loopback ports, with short cluster timings (heartbeat 0.5 s, runner timeout 3 s).
4. Submits batches to both; the same batch sent to the other server is reused.
5. Cancels a job drained by A through B: the fetch in flight is stored, the rest stay pending.
6. SIGKILLs A mid-drain: B reaps A's job (failed, error "restart") while B's own job finishes.
7. Stops everything it started. Works offline; exits non-zero if any step did not happen.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_postgres import start_postgres
from serve import DemoServer

TRIO_BATCH = str(Path(sys.executable).parent / "trio-batch")
TIMINGS = ["--heartbeat-interval", "0.5", "--runner-timeout", "3", "--poll-interval", "0.5"]
TOKENS = {name: f"demo-token-of-{name}" for name in ("alice", "bob", "carol")}
#: Generous bound on each wait, against hangs only.
DEADLINE = 60.0
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy


class DemoFailed(Exception):
    """A step did not end as the demo says it does."""


def step(title: str) -> None:
    bold, plain = ("\033[1m", "\033[0m") if sys.stdout.isatty() else ("", "")
    print(f"\n{bold}== {title}{plain}", flush=True)


def api(base: str, caller: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request to a server's HTTP API as ``caller``; (status, JSON body)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {TOKENS[caller]}")
    request.add_header("Content-Type", "application/json")
    try:
        with _http.open(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoFailed(f"timed out waiting for {what}")
        time.sleep(0.1)


def start_server(
    name: str, db_url: str, tokens: Path, workdir: Path
) -> tuple[subprocess.Popen[str], str]:
    """``trio-batch serve`` on a free loopback port; its process and base URL."""
    log_path = workdir / f"serve-{name}.log"  # the server's own log, kept for reading
    command = [TRIO_BATCH, "serve", "--db", db_url, "--bind", "127.0.0.1:0"]
    command += ["--tokens", str(tokens), "--allow-private", *TIMINGS]
    with open(log_path, "w") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        raise DemoFailed(f"server {name} did not start; see {log_path}")
    return proc, line.split()[-1]


def show(label: str, job: dict[str, Any]) -> None:
    targets = " ".join(t["status"] for t in job.get("targets", []))
    error = f" (error {job['error']!r})" if job.get("error") else ""
    print(f"  {label}: job {job['id']} {job['status']}{error}  targets: {targets}", flush=True)


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="trio-batch-cluster-"))
    tokens = workdir / "tokens"
    tokens.write_text("".join(f"{token} {caller}\n" for caller, token in TOKENS.items()))
    step("start a throw-away PostgreSQL server (Unix socket only)")
    pg = start_postgres()
    servers: list[subprocess.Popen[str]] = []
    site = DemoServer().start()
    try:
        db_url = pg.create_database("demo")
        print(f"  {db_url}")
        step("start two trio-batch serve processes on one database")
        a, a_url = start_server("A", db_url, tokens, workdir)
        b, b_url = start_server("B", db_url, tokens, workdir)
        servers += [a, b]
        print(f"  $ trio-batch serve --db {db_url} --bind 127.0.0.1:0 {' '.join(TIMINGS)} ...")
        print(f"  A: {a_url}   B: {b_url}   fixture pages: {site.base}")

        step("submit batches to both servers")

        def slow(n: int, tag: str) -> list[dict[str, str]]:
            return [{"url": f"{site.base}/slow/{tag}{i}"} for i in range(n)]

        alice_batch = {"targets": [{"url": f"{site.base}/index.html"}, *slow(8, "a")]}
        code, alice = api(a_url, "alice", "POST", "/v1/batches", alice_batch)
        print(f"  alice -> A: {code}, job {alice['id']}")
        code, again = api(b_url, "alice", "POST", "/v1/batches", alice_batch)
        print(f"  alice -> B, same batch: {code}, job {again['id']}, reused={again['reused']}")
        if again["id"] != alice["id"] or not again["reused"]:
            raise DemoFailed("the same batch through B was not reused")
        bob_batch = {"targets": [{"url": f"{site.base}/docs.html"}, *slow(3, "b")]}
        code, bob = api(b_url, "bob", "POST", "/v1/batches", bob_batch)
        print(f"  bob   -> B: {code}, job {bob['id']}")
        carol_batch = {"targets": slow(4, "c")}
        code, carol = api(a_url, "carol", "POST", "/v1/batches", carol_batch)
        print(f"  carol -> A: {code}, job {carol['id']}")

        step("cancel carol's job (drained by A) through B")
        time.sleep(0.5)  # let A start the first slow fetch
        code, cancelled = api(b_url, "carol", "POST", f"/v1/batches/{carol['id']}/cancel")
        print(f"  POST B/v1/batches/{carol['id']}/cancel: {code}, status {cancelled['status']}")
        if cancelled["status"] != "cancelled":
            raise DemoFailed("the cancel through B did not mark the job cancelled")
        path = f"/v1/batches/{carol['id']}"
        job = until(
            lambda: (
                (j := api(b_url, "carol", "GET", path)[1])
                and all(t["status"] != "running" for t in j["targets"])
                and j["counts"].get("done", 0) + j["counts"].get("failed", 0) >= 1
                and j
            ),
            "A to store the fetch in flight",
        )
        show("as B reads it", job)
        print("  (A learnt of the cancel by polling, stored the fetch in flight, started no more)")

        step("SIGKILL server A in the middle of alice's job")
        a.send_signal(signal.SIGKILL)
        a.wait()
        killed = time.monotonic()
        path = f"/v1/batches/{alice['id']}"
        job = until(
            lambda: (j := api(b_url, "alice", "GET", path)[1])["status"] != "running" and j,
            "B to reap A's job",
        )
        show(f"after {time.monotonic() - killed:.1f} s, B shows alice's", job)
        if (job["status"], job["error"]) != ("failed", "restart"):
            raise DemoFailed("A's job was not reaped as failed/restart")
        path = f"/v1/batches/{bob['id']}"
        job = until(
            lambda: (j := api(b_url, "bob", "GET", path)[1])["status"] != "running" and j,
            "bob's job to finish",
        )
        show("B's own job, bob's", job)
        if job["status"] != "done":
            raise DemoFailed("B's own job did not finish done")
        step("done: stopping B, the fixture server and PostgreSQL")
        return 0
    except DemoFailed as exc:
        print(f"demo-cluster failed: {exc} (server logs in {workdir})", file=sys.stderr)
        return 1
    finally:
        for proc in servers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        site.stop()
        pg.destroy()
        print(f"  server logs: {workdir}", flush=True)


if __name__ == "__main__":
    os.environ.pop("TRIO_BATCH_DB", None)
    sys.exit(main())
