"""The SQLite outbox: leasing a job's terminal event for delivery, and recording each attempt.

The events themselves are written by :class:`~trio_batch.store.sqlite.Store` in the same
transaction as each terminal status. One runner holds an SQLite database, so a lease held by
another owner is a dead process's and can be taken at once.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from ..._event import Delivery, JobEvent
from ..._model import is_job_id
from .._rows import attempt_values, delivery_from_row, event_from_row
from . import _queries as q
from ._store import Store

__all__ = ["claim_delivery", "get_delivery", "next_due", "record_delivery", "redeliver"]


def claim_delivery(
    store: Store, owner: str, *, now: float, lease: float, skip_urls: Collection[str] = ()
) -> JobEvent | None:
    """Lease the delivery due first (until ``now + lease``) for ``owner``, none to a URL of
    ``skip_urls``; None if none is due."""
    skip = json.dumps(sorted(skip_urls))
    with store.transaction():
        row = store.db.execute(
            q.CLAIM_DELIVERY, (owner, now + lease, now, now, owner, skip)
        ).fetchone()
    return None if row is None else event_from_row(row)


def record_delivery(
    store: Store,
    event: JobEvent,
    owner: str,
    *,
    answer: str,
    delivered: bool,
    now: float,
    next_at: float | None,
) -> bool:
    """Record one attempt at ``event`` and end ``owner``'s lease; False (nothing written) if the
    lease is no longer ``owner``'s (a redelivery dropped it)."""
    values = attempt_values(
        event, owner, answer=answer, delivered=delivered, now=now, next_at=next_at
    )
    with store.transaction():
        return store.db.execute(q.RECORD_DELIVERY, values).rowcount == 1


def get_delivery(store: Store, job_id: str, *, now: float) -> Delivery | None:
    """The delivery state of an unexpired job; None if it has no outbox row."""
    if not is_job_id(job_id):
        return None
    with store._locked():
        row = store.db.execute(q.GET_DELIVERY, (job_id, now)).fetchone()
    return None if row is None else delivery_from_row(row)


def redeliver(store: Store, job_id: str, *, now: float) -> Delivery | None:
    """Start a new round of attempts at the job's written event; None if it has none."""
    if not is_job_id(job_id):
        return None
    with store.transaction():
        if store.db.execute(q.REDELIVER, (now, now, now, now, job_id, now)).rowcount != 1:
            return None
        row = store.db.execute(q.GET_DELIVERY, (job_id, now)).fetchone()
    return None if row is None else delivery_from_row(row)


def next_due(store: Store) -> float | None:
    """When the earliest waiting delivery is due (one in flight: its lease's end); None
    if none waits."""
    with store._locked():
        row = store.db.execute(q.NEXT_DUE).fetchone()
    return None if row is None or row[0] is None else float(row[0])
