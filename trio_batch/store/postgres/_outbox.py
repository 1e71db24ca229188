"""The PostgreSQL outbox: leasing a job's terminal event for delivery, recording each attempt.

The events are written by :class:`~trio_batch.store.postgres.PostgresStore` in the same
transaction (or statement) as each terminal status. Runners share the outbox: an event is
leased by one runner at a time (``lease_owner``, ``lease_until``); a lease that lapsed, or
whose runner was reaped (no longer in ``runners``), is taken over by the next claim.
"""

from __future__ import annotations

from collections.abc import Collection

from ..._event import Delivery, JobEvent
from ..._model import is_job_id
from .._rows import attempt_values, delivery_from_row, event_from_row
from . import _outbox_queries as oq
from ._connection import Conn, Op
from ._store import PostgresStore

__all__ = ["claim_delivery", "get_delivery", "next_due", "record_delivery", "redeliver"]


def claim_delivery(
    store: PostgresStore, *, now: float, lease: float, skip_urls: Collection[str] = ()
) -> JobEvent | None:
    """Lease the delivery due first for ``store.runner_id`` until ``now + lease``, none to a
    URL of ``skip_urls``."""

    values = {
        "runner": store.runner_id,
        "until": now + lease,
        "now": now,
        "skip": sorted(skip_urls),
    }

    def claim(conn: Conn) -> JobEvent | None:
        row = store._one(conn, Op.WRITE, oq.CLAIM_DELIVERY, values).fetchone()
        return None if row is None else event_from_row(row)

    return store._run(claim)


def record_delivery(
    store: PostgresStore,
    event: JobEvent,
    *,
    answer: str,
    delivered: bool,
    now: float,
    next_at: float | None,
) -> bool:
    """Record one attempt and end the lease; False if the lease is no longer this runner's."""
    params = attempt_values(
        event, store.runner_id, answer=answer, delivered=delivered, now=now, next_at=next_at
    )
    return store._run(lambda c: store._one(c, Op.WRITE, oq.RECORD_DELIVERY, params).rowcount == 1)


def get_delivery(store: PostgresStore, job_id: str, *, now: float) -> Delivery | None:
    """The delivery state of an unexpired job; None if it has no outbox row."""
    if not is_job_id(job_id):
        return None
    row = store._run(
        lambda c: store._one(c, Op.READ, oq.GET_DELIVERY, (job_id, now)).fetchone(), op=Op.READ
    )
    return None if row is None else delivery_from_row(row)


def redeliver(store: PostgresStore, job_id: str, *, now: float) -> Delivery | None:
    """Start a new round of attempts at the job's written event; None if it has none."""
    if not is_job_id(job_id):
        return None
    values = (now, now, now, now, job_id, now)
    row = store._run(lambda c: store._one(c, Op.WRITE, oq.REDELIVER, values).fetchone())
    return None if row is None else delivery_from_row(row)


def next_due(store: PostgresStore) -> float | None:
    """When the earliest waiting delivery is due (one in flight: its lease's end); None
    if none waits."""
    row = store._run(lambda c: store._one(c, Op.READ, oq.NEXT_DUE).fetchone(), op=Op.READ)
    return None if row is None or row[0] is None else float(row[0])
