"""The PostgreSQL store's outcome writes sent from trio's loop, without the store thread.

:class:`OutcomeWriters` can spread them over several connections (``outcome_connections``;
:data:`OUTCOME_CONNECTIONS` by default), each with its own group commit
(:class:`~trio_batch.store._lanes.Lanes`), so the server runs more than one at a time; each
drain still waits for its own commit.

A shared commit's writes (``RECORD_OUTCOME`` each, or ``RECORD_ONGOING_OUTCOME`` for one
that cannot end its job; through the function on a pooled connection, the bounds ``SET
LOCAL`` before them there) go out in one pipeline on a
:class:`~._loop_conn.LoopConnection`, one transaction, answered as
:meth:`PostgresStore.record_outcomes` answers them. Two rare cases are left to that method on
the store thread, which tells them apart one write at a time: a batch with a retry in doubt
(its first attempt's commit was cut off), and a batch whose values the database refused (the
whole transaction rolled back, nothing stored: which write it was is not known here).

A commit has one deadline, ``store_timeout`` from the call of its first write (the commit in
flight it waited for included): whatever it sends (a write sent again, a case left to the
store thread) is bounded by what is left of it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg
import trio

from ..._errors import OutcomeExists, StoreUnavailable
from ..._model import Job, JobState, OutcomeWrite
from .._face import StoreOutcomes, TimedWrite
from .._lanes import Lanes
from .._protocol import STORED, Stored
from .._rows import job_after_outcome, seen_counts
from . import _queries as q
from ._connection import Op, PostgresConnection
from ._errors import translate_errors
from ._loop_conn import LoopConnection, Statement
from ._outcomes import PIPELINE_SUPPORTED, _outcome_answer
from ._store import PostgresStore

__all__ = ["OUTCOME_CONNECTIONS", "LoopOutcomes", "OutcomeWriters"]

#: Outcome connections per store by default: one. Two or three measured slower on 2 cores,
#: where the loop's own work, not the server, holds the 8-job rate (performance.md).
OUTCOME_CONNECTIONS = 1

Answers = list[Job | Stored | Exception | None]
#: A group commit's batch stored, observed: :meth:`StoreFace._commit_with`.
CommitWith = Callable[[StoreOutcomes, list[TimedWrite]], Awaitable[Answers]]


_RECORD = q.RECORD_OUTCOME_NUMBERED.encode()
_ONGOING = q.RECORD_ONGOING_OUTCOME_NUMBERED.encode()
_RECORD_CALL = q.RECORD_OUTCOME_CALL_NUMBERED.encode()
_SET_BOUNDS = q.SET_BOUNDS_NUMBERED.encode()
#: ``RECORD_OUTCOME`` prepared under this name on a direct connection.
_RECORD_NAME = b"trio_batch_record_outcome"
_ONGOING_NAME = b"trio_batch_record_ongoing_outcome"


class LoopOutcomes:
    """Outcome writes of ``store``'s runner on a connection of its own, from trio's loop.

    ``fallback`` makes the writes on the store thread (:meth:`PostgresStore.record_outcomes`),
    for the cases above. One commit at a time (a group commit's leader calls it).
    """

    def __init__(self, store: PostgresStore, fallback: StoreOutcomes) -> None:
        self.store = store
        self.link = LoopConnection(
            PostgresConnection(
                store.conninfo,
                store_timeout=store.store_timeout,
                connect_timeout=store.connect_timeout,
            )
        )
        self._fallback = fallback

    def close(self) -> None:
        """Close the connection for good."""
        self.link.opener.close(final=True)

    async def record_outcomes(
        self,
        writes: Sequence[OutcomeWrite],
        *,
        ttl: float,
        now: float,
        ongoing: bool = True,
        deadline: float | None = None,
    ) -> list[Job | Stored | Exception | None]:
        """As :meth:`PostgresStore.record_outcomes`: one transaction, one answer per write.

        On a direct connection a write its writer saw could not end its job (see
        :func:`_ongoing`) goes as ``RECORD_ONGOING_OUTCOME`` (``ongoing``: allowed); one of
        them found at its job's last outcome after all stored nothing, and goes again in a
        transaction of its own as ``RECORD_OUTCOME`` (a failure of that one is its answer
        alone: the others committed), by the same ``deadline`` (trio time; None:
        ``store_timeout`` from now), as is anything left to the store thread.

        Raises psycopg's error if the commit failed whole; if the connection was lost with it
        (or cut at the deadline: :class:`StoreUnavailable`), the writes are kept as maybe
        committed, so their retry is recognised. Cancellation: as
        :meth:`LoopConnection.exchange`, it cannot be cancelled once called.
        """
        store = self.store
        if deadline is None:
            deadline = trio.current_time() + store.store_timeout
        if store.in_doubt(writes):
            return await self._fallback(writes, ttl=ttl, now=now, deadline=deadline)
        answers: list[Job | Stored | Exception | None] = [None] * len(writes)
        sent = [
            (i, [values[name] for name in q.OUTCOME_PARAMS])
            for i, values in store._writable(writes, answers, ttl=ttl, now=now)
        ]
        if not sent:
            return answers
        mark = store.tally_mark()
        lean = [False] * len(sent)  # per write sent: as RECORD_ONGOING_OUTCOME

        def statements(link: LoopConnection) -> list[Statement]:
            if not link.pooled:  # the session's settings bound it: prepared statements
                lean[:] = [ongoing and _ongoing(writes[i]) for i, _ in sent]
                return [
                    Statement(_ONGOING, link.dump([*v, *_seen_values(writes[i])]), _ONGOING_NAME)
                    if is_lean
                    else Statement(_RECORD, link.dump(v), _RECORD_NAME)
                    for (i, v), is_lean in zip(sent, lean, strict=True)
                ]
            lean[:] = [False] * len(sent)
            bounds = Statement(_SET_BOUNDS, link.dump(link.opener.bounds_values(Op.WRITE)))
            return [bounds, *(Statement(_RECORD_CALL, link.dump(v)) for _, v in sent)]

        try:
            results = await self.link.exchange(statements, deadline)
        except psycopg.DataError:  # rolled back: the store thread tells which write it was
            return await self._fallback(writes, ttl=ttl, now=now, deadline=deadline)
        except (psycopg.Error, StoreUnavailable):
            if not self.link.is_open:  # lost with the connection: the commit may have happened
                store.lost_in_commit(writes)
            raise
        last: list[int] = []  # sent as ongoing, at their job's last outcome: stored nothing
        answered = results[len(results) - len(sent) :]
        for (i, _), result, is_lean in zip(sent, answered, lean, strict=True):
            row = self.link.row(result)
            if not is_lean:
                answers[i] = _outcome_answer(writes[i], row)
            elif row is not None and row[0] is None:
                last.append(i)
            else:
                answers[i] = _ongoing_answer(writes[i], row, ttl=ttl, now=now)
        done = [k for k in range(len(writes)) if k not in last]
        store.answered([writes[k] for k in done], [answers[k] for k in done], mark=mark)
        if last:
            try:
                with translate_errors(store.store_timeout):
                    again = await self.record_outcomes(
                        [writes[i] for i in last],
                        ttl=ttl,
                        now=now,
                        ongoing=False,
                        deadline=deadline,
                    )
            except StoreUnavailable as exc:
                again = [exc] * len(last)
            for i, answer in zip(last, again, strict=True):
                answers[i] = answer
        return answers


def _ongoing_answer(
    write: OutcomeWrite, row: Any, *, ttl: float, now: float
) -> Job | Stored | OutcomeExists | None:
    """What ``RECORD_ONGOING_OUTCOME``'s row (owned or not, not NULL) says of ``write``: as
    :func:`_outcome_answer`; the job is ``write.seen`` with the columns the write left (its
    lease bumped to ``now + ttl``, as the statement set it), or :data:`STORED` if the writer
    counts (``write.stored_since``) and the row is its view with this outcome counted in."""
    owned, status, error, done, failed = row
    seen = write.seen
    if status is None or seen is None:  # nothing stored
        return _outcome_answer(write, (owned, None))
    seen_done, seen_failed = seen_counts(seen, write.stored_since)
    if status == seen.status.value and error == seen.error and done == seen_done + 1:
        if write.stored_since is not None and failed == seen_failed + (write.error is not None):
            return STORED  # an ongoing write leaves its job live
        return job_after_outcome(seen, done=done, failed=failed, now=now, ttl=ttl)
    # The writer's view was stale (a cancel, say): the row's own values.
    return dataclasses.replace(
        seen,
        status=JobState(status),
        error=error,
        targets_done=done,
        targets_failed=failed,
        updated_at=now,
        expires_at=now + ttl,
    )


def _seen_values(write: OutcomeWrite) -> tuple[float, int, str, str, str | None]:
    """``RECORD_ONGOING_OUTCOME``'s parameters of the job as seen (an ongoing write has one)."""
    seen = write.seen
    assert seen is not None
    return seen.created_at, seen.targets_total, seen.caller, seen.caller_class, seen.idem_key


def _ongoing(write: OutcomeWrite) -> bool:
    """Whether ``write`` cannot end its job as its writer saw the job (``write.seen``, with
    ``write.stored_since``): more than one of its targets still without an outcome. Only a
    guess: the statement checks."""
    seen = write.seen
    return (
        seen is not None
        and seen.id == write.job_id
        and seen.targets_total - seen_counts(seen, write.stored_since)[0] > 1
    )


class OutcomeWriters:
    """A store's outcome writes: ``count`` loop connections, each a :class:`LoopOutcomes` and
    a group commit (:attr:`lanes`); without pipeline mode (libpq before 14) one group commit
    over ``on_thread``, the store thread. The write that ends a job tells the runners
    listening, in its own statement, if one waits on it (``RECORD_OUTCOME``).

    ``commit_with`` is the face's :meth:`~trio_batch.store._face.StoreFace._commit_with`;
    ``on_thread`` its :meth:`PostgresStore.record_outcomes` call on the store thread, which
    the loop connections also leave the rare cases to (see :class:`LoopOutcomes`).
    """

    def __init__(
        self,
        store: PostgresStore,
        commit_with: CommitWith,
        on_thread: StoreOutcomes,
        count: int,
    ) -> None:
        if count < 1:
            raise ValueError(f"outcome_connections must be at least 1, not {count}")
        self._store = store
        #: The loop connections' writers, one per lane (none without pipeline mode).
        self.loops = [LoopOutcomes(store, on_thread) for _ in range(count)]
        stores: list[StoreOutcomes] = [functools.partial(self._commit, o) for o in self.loops]
        if not PIPELINE_SUPPORTED:
            self.loops, stores = [], [on_thread]
        self.lanes: Lanes[TimedWrite, Job | Stored | None] = Lanes(
            [functools.partial(commit_with, store_outcomes) for store_outcomes in stores]
        )

    def close(self) -> None:
        """Close the loop connections for good."""
        for outcomes in self.loops:
            outcomes.close()

    async def _commit(
        self,
        outcomes: LoopOutcomes,
        writes: Sequence[OutcomeWrite],
        *,
        ttl: float,
        now: float,
        deadline: float,
    ) -> Answers:
        with translate_errors(self._store.store_timeout):
            return await outcomes.record_outcomes(writes, ttl=ttl, now=now, deadline=deadline)
