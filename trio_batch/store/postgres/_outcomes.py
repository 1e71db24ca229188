"""The PostgreSQL store's outcome writes: a shared commit's outcomes in one statement.

Part of :class:`~trio_batch.store.postgres.PostgresStore` (its base class): the writes of a
shared commit are one ``RECORD_OUTCOMES`` (through its function), one round trip and one
transaction whatever their number, each write all-or-nothing within it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import psycopg

from ..._errors import OutcomeExists, StoreError, StoreUnavailable
from ..._model import Job, OutcomeWrite
from .._rows import job_from_row
from . import _outcome_queries as wq
from . import _queries as q
from ._batch import OutcomeBatch, Sent
from ._connection import Conn, Op
from ._reads import PostgresReads

__all__ = ["PostgresOutcomes"]

#: Where a job row (``JOB_COLUMNS``) has its counts and its times.
_DONE, _FAILED, _UPDATED, _EXPIRES = 4, 5, 10, 11


class PostgresOutcomes(PostgresReads):
    """The outcome writes of :class:`~trio_batch.store.postgres.PostgresStore`."""

    def record_outcomes(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float
    ) -> list[Job | Exception | None]:
        """Store several outcomes in one transaction (group commit); one answer per write.

        Each write is all-or-nothing and answers, in order, the job as that write left it,
        None (the job is unknown, lapsed, or no longer this runner's: nothing written), or
        the exception that refused it alone (:class:`OutcomeExists`, ValueError,
        :class:`StoreError` for values the database refused). A write of a target the batch
        already writes is refused as the first is answered. The writes are one statement; if
        the database refuses one's values (and so the statement), each is sent again alone,
        to tell which, all in one transaction (a failure there stores none of them). If the
        connection is lost in the commit the writes may have committed: a retry of such a
        write that finds its very outcome stored answers the job instead of
        :class:`OutcomeExists`, so nothing is lost or counted twice.
        """
        batch = OutcomeBatch.of(writes)
        try:
            self._store_batch(batch, ttl, now)
        except StoreUnavailable:  # from a psycopg error (see _run)
            if self._conn is None:  # the connection was lost: the commit may have happened
                self.lost_in_commit(writes)
            raise
        if self.in_doubt(writes):
            try:
                self._run(lambda conn: self._recognise_retries(conn, batch, now), op=Op.READ)
            except BaseException:  # committed, its answers lost: a retry must recognise them
                self.lost_in_commit(writes)
                raise
        answers = batch.done()
        self.answered(writes, answers, batch.ended)
        return answers

    def _store_batch(self, batch: OutcomeBatch, ttl: float, now: float) -> None:
        """Send ``batch`` as one statement and answer its writes; if the database refuses a
        value, each write alone (see :meth:`_store_each`)."""
        part = batch.sent
        if not part:
            return
        params = self._outcomes_params(part, ttl=ttl, now=now)

        def send(conn: Conn) -> list[Any] | psycopg.DataError:
            try:
                return self._one(conn, Op.WRITE, wq.RECORD_OUTCOMES_CALL, params).fetchall()
            except psycopg.DataError as exc:  # rolled back: nothing of it is stored
                return exc

        rows = self._run(send)
        if not isinstance(rows, psycopg.DataError):
            self._answer_rows(batch, part, rows, ttl, now)
        elif len(batch.storable) == 1:
            refused = StoreError(f"the database refused this outcome: {rows}")
            batch.answers[part[0].at] = refused
        else:
            each = batch.one_by_one()
            for sent, answer in self._run(lambda conn: self._store_each(conn, each, ttl, now)):
                if isinstance(answer, psycopg.DataError):
                    refused = StoreError(f"the database refused this outcome: {answer}")
                    batch.answers[sent.at] = refused
                else:
                    self._answer_rows(batch, [sent], [answer], ttl, now)

    def _store_each(
        self, conn: Conn, part: list[Sent], ttl: float, now: float
    ) -> list[tuple[Sent, Any]]:
        """The writes of ``part`` one statement each, in ONE transaction, each behind a
        savepoint: one whose values the database refuses is rolled back alone (its
        DataError is its answer; the others' rows theirs). Committed whole or not at all, so
        a failure part way (a lock held past its bound) leaves none of it stored."""
        answered: list[tuple[Sent, Any]] = []
        with self._tx(conn, Op.WRITE):
            for sent in part:
                conn.execute("SAVEPOINT outcome", prepare=False)
                params = self._outcomes_params([sent], ttl=ttl, now=now)
                try:
                    [row] = conn.execute(wq.RECORD_OUTCOMES_CALL, params).fetchall()
                except psycopg.DataError as exc:
                    conn.execute("ROLLBACK TO SAVEPOINT outcome", prepare=False)
                    answered.append((sent, exc))
                    continue
                answered.append((sent, row))
        return answered

    def _answer_rows(
        self, batch: OutcomeBatch, part: list[Sent], rows: list[Any], ttl: float, now: float
    ) -> None:
        """Answer the writes of ``part`` from the rows the statement that stored them gave."""
        # Each job as it was before the statement, with what the statement added: as it left it.
        after: dict[str, list[Any]] = {}
        stored: set[int] = set()
        for sent, (_, owned, was_stored, *job_row) in zip(part, rows, strict=True):
            if not was_stored:
                batch.refuse(sent, job_known=owned)
                continue
            stored.add(sent.at)
            job_row = after.setdefault(sent.write.job_id, job_row)
            job_row[_DONE] += 1
            job_row[_FAILED] += sent.error is not None
        for job_row in after.values():
            job_row[_UPDATED], job_row[_EXPIRES] = now, now + ttl
        # The statement stored the ends (status, event) itself.
        batch.answer_stored(part, stored, {i: job_from_row(r) for i, r in after.items()})

    def _recognise_retries(self, conn: Conn, batch: OutcomeBatch, now: float) -> None:
        """A retried write whose first attempt committed (its answer lost with the
        connection) finds its very outcome stored: it answers the job as it is now."""
        for sent in batch.sent:
            key = (sent.write.job_id, sent.write.idx)
            answer = batch.answers[sent.at]
            if not isinstance(answer, OutcomeExists) or key not in self._maybe_committed:
                continue
            if self._one(conn, Op.READ, wq.GET_OUTCOME, key).fetchone() == sent.values:
                row = self._one(conn, Op.READ, q.GET_JOB, (sent.write.job_id, now)).fetchone()
                batch.answers[sent.at] = None if row is None else job_from_row(row)

    def _outcomes_params(self, sent: Sequence[Sent], *, ttl: float, now: float) -> dict[str, Any]:
        """``RECORD_OUTCOMES``'s parameters for the writes ``sent``."""
        return {
            "job_ids": [s.write.job_id for s in sent],
            "idxs": [s.idx for s in sent],
            "statuses": [s.status for s in sent],
            "results": [s.result for s in sent],
            "errors": [s.error for s in sent],
            "hints": [s.hint for s in sent],
            "attempts": [s.write.attempts for s in sent],
            "failed": [int(s.error is not None) for s in sent],
            "sizes": [s.size for s in sent],
            "now": now,
            "expires": now + ttl,
            "runner": self.runner_id,
        }

    def answered(
        self,
        writes: Sequence[OutcomeWrite],
        answers: Sequence[Job | Exception | None],
        ended: Collection[int] = (),
    ) -> None:
        """``writes`` were committed (or refused) with ``answers``: none is in doubt any more,
        and the jobs they finished are counted: those of the writes at ``ended`` (each its
        live job's last outcome). Any other answer of a terminal job (an outcome landing on a
        job cancelled or failed before, or a retry recognised, which cannot tell which write
        ended its job) changed what the counted terminal jobs hold: they are counted afresh."""
        for write in writes:
            self._maybe_committed.discard((write.job_id, write.idx))
        recount = False
        for i, answer in enumerate(answers):
            if isinstance(answer, Job) and answer.is_terminal:
                if i in ended:
                    self._count_finished(answer)
                else:
                    recount = True
        if recount:
            self._recount_finished()

    def in_doubt(self, writes: Sequence[OutcomeWrite]) -> bool:
        """Whether any of ``writes`` is a retry in doubt (its first attempt's commit was cut
        off): its answer may need its stored outcome read."""
        return any((w.job_id, w.idx) in self._maybe_committed for w in writes)

    def lost_in_commit(self, writes: Sequence[OutcomeWrite]) -> None:
        """The connection was lost while ``writes`` were being committed: they may have been."""
        self._maybe_committed.update((w.job_id, w.idx) for w in writes)
