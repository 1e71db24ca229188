"""A runner SIGKILLed between a job's terminal commit and its webhook's delivery: the next
runner sends the event, once; killed mid-delivery, the event goes out again with the same id."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

import trio
import trustme

from trio_batch import JobState, Store, open_runner
from trio_batch.fetchers import DestinationPolicy, WebhookSender

from ..support.deliveries import delivery_reaches
from ..support.fakes import ScriptedFetch
from ..support.webhook_receiver import Receiver

CHILD = """
import ssl, sys, trio
from trio_batch import Result, Store, Target, open_runner
from trio_batch.fetchers import DestinationPolicy, WebhookSender

path, url, secret, ca, mode = sys.argv[1:]

class Stalled(WebhookSender):
    async def deliver(self, event):
        print("delivering", event.id, flush=True)  # the terminal status is committed
        await trio.sleep_forever()

async def fetch(target):
    return Result("ok")

async def main():
    context = ssl.create_default_context(cafile=ca)
    kind = Stalled if mode == "stall" else WebhookSender
    sender = kind(secret, DestinationPolicy(allow_private=True), ssl_context=context)
    async with open_runner(Store.open(path), fetch, webhooks=sender) as runner:
        job_id, _ = await runner.submit(
            "alice", "user", [Target("https://example.test/1")], webhook=url
        )
        print(job_id, flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


def run_child(args: list[str], until: Callable[[IO[str]], str | None]) -> tuple[str, str | None]:
    """Start the child, read its job id, run ``until`` on its output, then SIGKILL it;
    returns the job id and what ``until`` returned."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        job_id = child.stdout.readline().strip()
        seen = until(child.stdout)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    return job_id, seen


def line_starting(prefix: str) -> Callable[[IO[str]], str]:
    def read(out: IO[str]) -> str:
        line = out.readline()
        while not line.startswith(prefix):
            assert line, "the child ended"
            line = out.readline()
        return line.strip()

    return read


async def deliver_what_is_left(path: Path, receiver: Receiver, job_id: str) -> None:
    sender = WebhookSender(
        receiver.secret, DestinationPolicy(allow_private=True), ssl_context=receiver.client_context
    )
    async with open_runner(Store.open(path), ScriptedFetch(), webhooks=sender) as runner:
        await delivery_reaches(runner, job_id, state="delivered")


def child_args(tmp_path: Path, receiver: Receiver, ca: trustme.CA, mode: str) -> list[str]:
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    return [str(tmp_path / "jobs.db"), receiver.url, receiver.secret, str(pem), mode]


async def test_killed_after_the_terminal_commit_the_event_goes_out_once_from_the_next_run(
    tmp_path: Path, receiver: Receiver, webhook_ca: trustme.CA
) -> None:
    args = child_args(tmp_path, receiver, webhook_ca, "stall")
    job_id, line = await trio.to_thread.run_sync(run_child, args, line_starting("delivering"))
    assert line is not None
    event_id = line.split()[1]
    with Store.open(tmp_path / "jobs.db") as store:
        job = store.get_job(job_id)
        assert job is not None and job.status == JobState.DONE  # committed before it died
    assert receiver.received == []
    await deliver_what_is_left(tmp_path / "jobs.db", receiver, job_id)
    (got,) = receiver.received
    assert (got.webhook_id, got.verified, got.answered) == (event_id, True, 204)
    assert got.payload["data"]["id"] == job_id and got.payload["type"] == "job.done"


async def test_killed_while_the_receiver_holds_its_answer_the_event_goes_out_again(
    tmp_path: Path, receiver: Receiver, webhook_ca: trustme.CA
) -> None:
    receiver.hold.clear()  # the first delivery arrives, and its answer is held back
    args = child_args(tmp_path, receiver, webhook_ca, "send")
    job_id, _ = await trio.to_thread.run_sync(
        run_child, args, lambda out: receiver.wait_for_request(1)
    )
    receiver.hold.set()
    await deliver_what_is_left(tmp_path / "jobs.db", receiver, job_id)
    ids = [r.webhook_id for r in receiver.received]
    assert len(ids) == 2 and len(set(ids)) == 1  # at least once: the same id, twice
    assert all(r.verified for r in receiver.received)
