"""The PostgreSQL store's outcome writes: one statement per outcome, several in one commit.

Part of :class:`~trio_batch.store.postgres.PostgresStore` (its base class): each outcome is
``RECORD_OUTCOME`` (through its function on a pooled connection), atomic on its own; the writes
of a shared commit go out in one pipeline with its ``BEGIN`` and ``COMMIT``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from ..._errors import OutcomeExists, StoreError, StoreUnavailable
from ..._model import Job, JobState, OutcomeWrite
from .._rows import job_from_row, write_values
from . import _outcome_queries as wq
from . import _queries as q
from ._connection import Conn, Op, rollback
from ._reads import PostgresReads

__all__ = ["PIPELINE_SUPPORTED", "PostgresOutcomes"]

#: The statuses the last outcome of a job gives it.
_FINAL_STATUSES = frozenset({JobState.DONE, JobState.FAILED, JobState.PARTIAL})

#: psycopg's pipeline mode needs libpq 14 or newer (psycopg[binary] ships one).
PIPELINE_SUPPORTED = psycopg.Pipeline.is_supported()


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
        transaction, which is then made again without it. Several writes go out in psycopg's
        pipeline mode, together, instead of each waiting for the answer to the one before (a
        round trip each would also wait, each time, for the store thread to get the GIL back
        from a busy event loop); a refused value there sends the batch again one write at a
        time, to tell which it was.
        A single write runs in autocommit, its own transaction. If the commit is cut off by a
        lost connection the writes may have committed: a retry of such a write (sent one at a
        time) that finds its very outcome stored answers the job instead of
        :class:`OutcomeExists`, so nothing is lost or counted twice.
        """
        answers: list[Job | Exception | None] = [None] * len(writes)
        todo = list(range(len(writes)))

        def pipelined(conn: Conn) -> None:
            try:
                answers[:] = self._record_pipelined(conn, writes, ttl, now)
                todo.clear()
            except psycopg.DataError:
                pass  # rolled back: one write at a time below, to tell which was refused

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
            if self._can_pipeline(writes):
                self._run(pipelined)
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

    def _can_pipeline(self, writes: Sequence[OutcomeWrite]) -> bool:
        """Whether ``writes`` can go to the server in one pipeline: several of them, and none
        a retry in doubt."""
        return len(writes) > 1 and PIPELINE_SUPPORTED and not self.in_doubt(writes)

    def _record_pipelined(
        self, conn: Conn, writes: Sequence[OutcomeWrite], ttl: float, now: float
    ) -> list[Job | Exception | None]:
        """Several writes in one transaction, sent in psycopg's pipeline mode with its
        ``BEGIN``, bounds and ``COMMIT``: all go out together and their answers are read
        after, so the batch costs one round trip (the pipeline's closing Sync one more)
        whatever its size. Raises ``psycopg.DataError``, the transaction rolled back, if the
        database refused a write's values (the server then skips what follows, ``COMMIT``
        included), from a fetch or from a later statement's send (psycopg reads the answers
        that have come whenever it sends): which write it was is not known here.
        """
        answers: list[Job | Exception | None] = [None] * len(writes)
        refused: psycopg.DataError | None = None
        try:
            with conn.pipeline() as pipeline:
                try:
                    self._begin_pipelined(conn, Op.WRITE)
                    sent: list[tuple[int, OutcomeWrite, psycopg.Cursor[Any]]] = []
                    for i, values in self._writable(writes, answers, ttl=ttl, now=now):
                        sent.append((i, writes[i], conn.execute(self._outcome_sql, values)))
                    conn.execute("COMMIT", prepare=False)
                    for i, write, cursor in sent:
                        answers[i] = _outcome_answer(write, cursor.fetchone())
                except psycopg.DataError as exc:
                    refused = exc
                    # Read what the aborted pipeline still owes here: left to the block's
                    # end, psycopg would log its "pipeline aborted" as a warning, for a
                    # refusal the caller handles.
                    with contextlib.suppress(psycopg.errors.PipelineAborted):
                        pipeline.sync()
        except BaseException:
            rollback(conn)
            raise
        if refused is not None:
            rollback(conn)
            raise refused
        return answers

    @property
    def _outcome_sql(self) -> str:
        """``RECORD_OUTCOME``, prepared on a direct connection; through a pooler (nothing
        prepared), the function that keeps its plan on the server."""
        return wq.RECORD_OUTCOME_CALL if self.pooled else wq.RECORD_OUTCOME

    def _writable(
        self,
        writes: Sequence[OutcomeWrite],
        answers: list[Job | Exception | None],
        *,
        ttl: float,
        now: float,
    ) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each write that can be stored, as its index and parameters, made as they are
        taken; one that cannot gets its ValueError in ``answers`` (nothing sent for it)."""
        for i, write in enumerate(writes):
            try:
                values = self._outcome_values(write, ttl=ttl, now=now)
            except ValueError as exc:
                answers[i] = exc
                continue
            yield i, values

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
            stored = self._one(conn, Op.READ, wq.GET_OUTCOME, key).fetchone()
        else:
            stored = conn.execute(wq.GET_OUTCOME, key).fetchone()
        if stored != (values["status"], values["result"], values["error"], values["hint"]):
            return answer
        # The first attempt of this retried write committed before its answer was lost.
        if alone:
            job_row = self._one(conn, Op.READ, q.GET_JOB, (write.job_id, now)).fetchone()
            return None if job_row is None else job_from_row(job_row)
        return self._get_job(conn, write.job_id, now)
