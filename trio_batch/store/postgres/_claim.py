"""A runner's claim on a PostgreSQL database that many runners share: its registration, its
heartbeats on a connection and thread of their own (so a busy store thread cannot starve
them), and the reaping of runners silent past ``runner_timeout``.

A runner reaped while paused or cut off registers again under a new id and carries on as a
fresh runner: its old jobs were failed and are fenced off.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, TypeVar

import trio

from ..._errors import StoreError, StoreUnavailable
from .._thread import StoreThread
from ._errors import translate_errors
from ._store import PostgresStore

if TYPE_CHECKING:
    from ._job_store import PostgresJobStore

__all__ = ["claim_runner"]

T = TypeVar("T")

_log = logging.getLogger("trio_batch")


@contextlib.asynccontextmanager
async def claim_runner(
    js: PostgresJobStore, *, heartbeat_interval: float = 5.0, runner_timeout: float = 30.0
) -> AsyncIterator[None]:
    """Register a runner (a fresh id) for the block, heartbeating and reaping meanwhile.

    Never :class:`StoreLocked`: any number of runners share the database. Jobs created
    through this store during the block are this runner's. Leaving the block (however it
    is left) stops the heartbeats and removes the registration; if the process dies
    instead, the other runners reap it once it has been silent for ``runner_timeout``.
    Raises :class:`StoreUnavailable` if the registration cannot be written.
    """
    if js.store.runner_id is not None:
        raise StoreError(f"a runner is already registered through this store ({js.location})")
    if not 0 < heartbeat_interval < runner_timeout:
        raise ValueError(
            f"heartbeat_interval ({heartbeat_interval:g} s) must be positive and shorter "
            f"than runner_timeout ({runner_timeout:g} s)"
        )
    js._runner_timeout = runner_timeout
    # Registered first: if that fails, there is no heartbeat thread or connection to undo.
    registering = trio.current_time()
    js.store.runner_id = await js._on_thread(PostgresStore.register_runner)
    js._beat_ok_at = registering
    # A heartbeat that hangs is a missed one; bounded by a quarter of runner_timeout too,
    # so one hung beat cannot last until the others reap this runner. Not by the interval:
    # reconnecting on a slow network takes several round trips.
    beat_timeout = min(js.store.store_timeout, runner_timeout / 4)
    beat_store = PostgresStore(
        js.store.conninfo, store_timeout=beat_timeout, connect_timeout=beat_timeout
    )
    beat_thread = StoreThread(name="trio_batch postgres heartbeat")
    body_error: BaseException | None = None
    try:
        beat_thread.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                _heartbeat, js, beat_store, beat_thread, heartbeat_interval, runner_timeout
            )
            try:
                yield
            except BaseException as exc:
                body_error = exc  # re-raised outside the nursery, so it is not wrapped
            finally:
                nursery.cancel_scope.cancel()
        if body_error is not None:
            raise body_error
    finally:
        with trio.CancelScope(shield=True):
            runner_id, js.store.runner_id = js.store.runner_id, None
            try:
                await js._on_thread(PostgresStore.unregister_runner, runner_id)
            except StoreUnavailable:
                _log.warning(
                    "could not remove the runner's registration; it will be reaped",
                    exc_info=True,
                    extra={"runner_id": runner_id},
                )
            if beat_thread.started:
                await beat_thread.run(beat_store.close, final=True)
            else:
                beat_store.close(final=True)
            beat_thread.stop()


async def _heartbeat(
    js: PostgresJobStore,
    beat_store: PostgresStore,
    beat_thread: StoreThread,
    interval: float,
    runner_timeout: float,
) -> None:
    """Every ``interval``: heartbeat, re-register if reaped, and reap silent runners."""

    async def beat(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        deadline = time.monotonic() + beat_store.store_timeout
        return await beat_thread.run(beat_store.within, deadline, fn, *args, **kwargs)

    while True:
        await trio.sleep(interval)
        runner_id = js.store.runner_id
        if runner_id is None:
            return
        sent = trio.current_time()
        try:
            with translate_errors(beat_store.store_timeout):
                alive = await beat(PostgresStore.heartbeat, runner_id)
                if not alive:
                    # Reaped while paused or cut off: its jobs were failed and lost their
                    # owner, so its drains' writes are refused. Carry on as a new runner.
                    new_id = await beat(PostgresStore.register_runner)
                    js.store.runner_id = new_id
                    _log.warning(
                        "this runner was reaped by another; registered again",
                        extra={"runner_id": runner_id, "new_runner_id": new_id},
                    )
                js._beat_ok_at = sent
                reaped = await beat(PostgresStore.reap, runner_timeout, now=None)
            if reaped:
                _log.warning(
                    "live jobs of silent runners marked failed", extra={"jobs": len(reaped)}
                )
                if js.on_reaped is not None:
                    js.on_reaped(reaped)
        except StoreUnavailable:
            _log.warning("heartbeat failed", exc_info=True, extra={"runner_id": runner_id})
