"""The PostgreSQL store's outcome writes: one statement per outcome, several in one commit.

Part of :class:`~trio_batch.store.postgres.PostgresStore` (its base class): each outcome is
``RECORD_OUTCOME`` (through its function on a pooled connection), atomic on its own; the writes
of a shared commit go in one transaction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg

from ..._errors import OutcomeExists, StoreError, StoreUnavailable
from ..._model import Job, JobState, OutcomeWrite
from .._rows import job_from_row, write_values
from . import _queries as q
from ._connection import Conn, Op
from ._reads import PostgresReads

__all__ = ["PostgresOutcomes"]

#: The statuses the last outcome of a job gives it.
_FINAL_STATUSES = frozenset({JobState.DONE, JobState.FAILED, JobState.PARTIAL})


def _outcome_answer(write: OutcomeWrite, row: Any) -> Job | OutcomeExists | None:
    """What ``RECORD_OUTCOME``'s one row says of ``write``: the job it bumped, None (the job is
    unknown, lapsed or not this runner's), or OutcomeExists (the target was not pending)."""
    assert row is not None  # the statement always answers one row
    owned, *job_row = row
    if job_row[0] is not None:
        return job_from_row(job_row)
    if not owned:
        return None
    return OutcomeExists(
        f"target {write.idx} of job {write.job_id} already has an outcome or does not exist"
    )


class _Refused(Exception):
    """The database refused one write's values, aborting the transaction: make it again
    without that write (``index`` in the batch)."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class PostgresOutcomes(PostgresReads):
    """The outcome writes of :class:`~trio_batch.store.postgres.PostgresStore`."""

    def record_outcomes(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float
    ) -> list[Job | Exception | None]:
        """Store several outcomes in one transaction (group commit); one answer per write.

        Each write is one statement (``RECORD_OUTCOME``), atomic on its own, and answers the
        updated job, None (the job is unknown, lapsed, or no longer this runner's: nothing
        written), or the exception that refused it alone (:class:`OutcomeExists`, ValueError,
        :class:`StoreError` for values the database refused). A refused write changes nothing,
        so the writes need no savepoints; a write whose values the database refuses aborts the
        transaction, which is then made again without it. A single write runs in autocommit,
        its own transaction. If the commit is cut off by a lost connection the writes may have
        committed: a retry of such a write that finds its very outcome stored answers the job
        instead of :class:`OutcomeExists`, so nothing is lost or counted twice.
        """
        answers: list[Job | Exception | None] = [None] * len(writes)
        todo = list(range(len(writes)))

        def record(conn: Conn) -> None:
            alone = len(todo) == 1  # one statement: a transaction of its own
            with contextlib.nullcontext() if alone else self._tx(conn, Op.WRITE):
                for i in todo:
                    try:
                        answers[i] = self._record_one(conn, writes[i], ttl, now, alone=alone)
                    except ValueError as exc:  # refused before any SQL: nothing sent
                        answers[i] = exc
                    except psycopg.DataError as exc:
                        # The database refused this write's values alone, and with them the
                        # transaction: a typed answer for it, and the others made again.
                        answers[i] = StoreError(f"the database refused this outcome: {exc}")
                        raise _Refused(i) from exc

        try:
            while todo:
                try:
                    self._run(record)
                    break
                except _Refused as refused:  # rolled back: again without the refused write
                    todo.remove(refused.index)
        except StoreUnavailable:  # from a psycopg error (see _run)
            if self._conn is None:  # the connection was lost: the commit may have happened
                self.lost_in_commit(writes)
            raise
        self.answered(writes, answers)
        return answers

    def answered(
        self, writes: Sequence[OutcomeWrite], answers: Sequence[Job | Exception | None]
    ) -> None:
        """``writes`` were committed (or refused) with ``answers``: none is in doubt any more,
        and the jobs they finished are counted."""
        for write in writes:
            self._maybe_committed.discard((write.job_id, write.idx))
        for answer in answers:
            # The write that stores a job's last outcome sets its final status (a cancelled
            # job was terminal before).
            if (
                isinstance(answer, Job)
                and answer.status in _FINAL_STATUSES
                and answer.targets_done >= answer.targets_total
            ):
                self._count_finished(answer)

    def in_doubt(self, writes: Sequence[OutcomeWrite]) -> bool:
        """Whether any of ``writes`` is a retry in doubt (its first attempt's commit was cut
        off): its answer may need its stored outcome read, one write at a time."""
        return any((w.job_id, w.idx) in self._maybe_committed for w in writes)

    def lost_in_commit(self, writes: Sequence[OutcomeWrite]) -> None:
        """The connection was lost while ``writes`` were being committed: they may have been."""
        self._maybe_committed.update((w.job_id, w.idx) for w in writes)

    @property
    def _outcome_sql(self) -> str:
        """``RECORD_OUTCOME``, prepared on a direct connection; through a pooler (nothing
        prepared), the function that keeps its plan on the server."""
        return q.RECORD_OUTCOME_CALL if self.pooled else q.RECORD_OUTCOME

    def _outcome_values(self, write: OutcomeWrite, *, ttl: float, now: float) -> dict[str, Any]:
        """``RECORD_OUTCOME``'s parameters for ``write``; ValueError for a write that cannot
        be stored (see :func:`write_values`)."""
        status, result_text, error, hint = write_values(write)
        return {
            "job_id": write.job_id,
            "idx": write.idx,
            "now": now,
            "expires": now + ttl,
            "runner": self.runner_id,
            "status": status.value,
            "result": result_text,
            "error": error,
            "hint": hint,
            "attempts": write.attempts,
            "failed": int(error is not None),
            "size": 0 if result_text is None else len(result_text),
        }

    def _record_one(
        self, conn: Conn, write: OutcomeWrite, ttl: float, now: float, *, alone: bool
    ) -> Job | OutcomeExists | None:
        """One write, one statement: the job, None (not this runner's), or OutcomeExists.
        ``alone``: the write is a transaction of its own (else one is open on ``conn``)."""
        values = self._outcome_values(write, ttl=ttl, now=now)
        if alone:
            row = self._one(conn, Op.WRITE, self._outcome_sql, values).fetchone()
        else:
            row = conn.execute(self._outcome_sql, values).fetchone()
        answer = _outcome_answer(write, row)
        if not (
            isinstance(answer, OutcomeExists) and (write.job_id, write.idx) in self._maybe_committed
        ):
            return answer
        key = (write.job_id, write.idx)
        if alone:
            stored = self._one(conn, Op.READ, q.GET_OUTCOME, key).fetchone()
        else:
            stored = conn.execute(q.GET_OUTCOME, key).fetchone()
        if stored != (values["status"], values["result"], values["error"], values["hint"]):
            return answer
        # The first attempt of this retried write committed before its answer was lost.
        if alone:
            job_row = self._one(conn, Op.READ, q.GET_JOB, (write.job_id, now)).fetchone()
            return None if job_row is None else job_from_row(job_row)
        return self._get_job(conn, write.job_id, now)
