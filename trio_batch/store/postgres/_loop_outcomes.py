"""The PostgreSQL store's outcome writes sent from trio's loop, without the store thread.

A shared commit's writes (``RECORD_OUTCOME`` each, through its function on a pooled
connection, the bounds ``SET LOCAL`` before them there) go out in one pipeline on a
:class:`~._loop_conn.LoopConnection`, one transaction, answered as
:meth:`PostgresStore.record_outcomes` answers them. Two rare cases are left to that method on
the store thread, which tells them apart one write at a time: a batch with a retry in doubt
(its first attempt's commit was cut off), and a batch whose values the database refused (the
whole transaction rolled back, nothing stored: which write it was is not known here).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import psycopg

from ..._errors import StoreUnavailable
from ..._model import Job, OutcomeWrite
from . import _queries as q
from ._connection import Op, PostgresConnection
from ._loop_conn import LoopConnection, Statement
from ._outcomes import _outcome_answer
from ._store import PostgresStore

__all__ = ["LoopOutcomes"]

#: What the store thread's writes are reached by: ``(writes, ttl, now)``, their answers.
Fallback = Callable[[Sequence[OutcomeWrite], float, float], Awaitable[list[Job | Exception | None]]]

_RECORD = q.RECORD_OUTCOME_NUMBERED.encode()
_RECORD_CALL = q.RECORD_OUTCOME_CALL_NUMBERED.encode()
_SET_BOUNDS = q.SET_BOUNDS_NUMBERED.encode()
#: ``RECORD_OUTCOME`` prepared under this name on a direct connection.
_RECORD_NAME = b"trio_batch_record_outcome"


class LoopOutcomes:
    """Outcome writes of ``store``'s runner on a connection of its own, from trio's loop.

    ``fallback`` makes the writes on the store thread (:meth:`PostgresStore.record_outcomes`),
    for the cases above. One commit at a time (a group commit's leader calls it).
    """

    def __init__(self, store: PostgresStore, fallback: Fallback) -> None:
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
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float
    ) -> list[Job | Exception | None]:
        """As :meth:`PostgresStore.record_outcomes`: one transaction, one answer per write.

        Raises psycopg's error if the commit failed whole; if the connection was lost with it
        (or cut at ``store_timeout``: :class:`StoreUnavailable`), the writes are kept as maybe
        committed, so their retry is recognised. Cancellation: as
        :meth:`LoopConnection.exchange`, it cannot be cancelled once called.
        """
        store = self.store
        if store.in_doubt(writes):
            return await self._fallback(writes, ttl, now)
        answers: list[Job | Exception | None] = [None] * len(writes)
        sent = [
            (i, [values[name] for name in q.OUTCOME_PARAMS])
            for i, values in store._writable(writes, answers, ttl=ttl, now=now)
        ]
        if not sent:
            return answers
        mark = store.tally_mark()

        def statements(link: LoopConnection) -> list[Statement]:
            if not link.pooled:  # the session's settings bound it: a prepared statement
                return [Statement(_RECORD, link.dump(v), _RECORD_NAME) for _, v in sent]
            bounds = Statement(_SET_BOUNDS, link.dump(link.opener.bounds_values(Op.WRITE)))
            return [bounds, *(Statement(_RECORD_CALL, link.dump(v)) for _, v in sent)]

        try:
            results = await self.link.exchange(statements)
        except psycopg.DataError:  # rolled back: the store thread tells which write it was
            return await self._fallback(writes, ttl, now)
        except (psycopg.Error, StoreUnavailable):
            if not self.link.is_open:  # lost with the connection: the commit may have happened
                store.lost_in_commit(writes)
            raise
        for (i, _), result in zip(sent, results[len(results) - len(sent) :], strict=True):
            answers[i] = _outcome_answer(writes[i], self.link.row(result))
        store.answered(writes, answers, mark=mark)
        return answers
