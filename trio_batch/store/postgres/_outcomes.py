"""The PostgreSQL store's outcome writes: a shared commit's outcomes in one statement.

Part of :class:`~trio_batch.store.postgres.PostgresStore` (its base class): the writes of a
shared commit are one ``RECORD_OUTCOMES`` (through its function), one round trip and one
transaction whatever their number, each write all-or-nothing within it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg

from ..._errors import OutcomeExists, StoreError, StoreUnavailable
from ..._model import Job, JobState, OutcomeWrite, final_status
from .._rows import job_from_row, write_values
from . import _outcome_queries as wq
from . import _queries as q
from ._connection import Conn, Op
from ._reads import PostgresReads

__all__ = ["PostgresOutcomes"]

#: The statuses the last outcome of a job gives it.
_FINAL_STATUSES = frozenset({JobState.DONE, JobState.FAILED, JobState.PARTIAL})

#: A write to send: its index among the writes, the write, and its stored values (status,
#: result text, error, hint).
_Sent = tuple[int, OutcomeWrite, tuple[str, str | None, str | None, str | None]]


def _exists(write: OutcomeWrite) -> OutcomeExists:
    return OutcomeExists(
        f"target {write.idx} of job {write.job_id} already has an outcome or does not exist"
    )


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
        to tell which. If the connection is lost in the commit the writes may have committed:
        a retry of such a write that finds its very outcome stored answers the job instead of
        :class:`OutcomeExists`, so nothing is lost or counted twice.
        """
        answers: list[Job | Exception | None] = [None] * len(writes)
        batch: list[_Sent] = []
        first: dict[tuple[str, int], int] = {}  # each target's first write in the batch
        repeats: list[tuple[int, int]] = []
        for i, write in enumerate(writes):
            try:
                status, result, error, hint = write_values(write)
            except ValueError as exc:  # refused before any SQL: nothing sent
                answers[i] = exc
                continue
            key = (write.job_id, write.idx)
            if key in first:
                repeats.append((i, first[key]))
                continue
            first[key] = i
            batch.append((i, write, (status.value, result, error, hint)))
        try:
            self._store_batch(batch, answers, ttl, now)
            if self.in_doubt(writes):
                self._run(lambda conn: self._recognise_retries(conn, batch, answers, now))
        except StoreUnavailable:  # from a psycopg error (see _run)
            if self._conn is None:  # the connection was lost: the commit may have happened
                self.lost_in_commit(writes)
            raise
        for i, j in repeats:
            earlier = answers[j]
            answers[i] = None if earlier is None else _exists(writes[i])
        self.answered(writes, answers)
        return answers

    def _store_batch(
        self, batch: list[_Sent], answers: list[Job | Exception | None], ttl: float, now: float
    ) -> None:
        """Send ``batch`` as one statement and put each write's answer in ``answers``; if the
        database refuses a value, each write alone, that one answering a StoreError."""
        if not batch:
            return
        params = self._outcomes_params([write for _, write, _ in batch], ttl=ttl, now=now)

        def send(conn: Conn) -> list[Any] | psycopg.DataError:
            try:
                return self._one(conn, Op.WRITE, wq.RECORD_OUTCOMES_CALL, params).fetchall()
            except psycopg.DataError as exc:  # rolled back: nothing of it is stored
                return exc

        rows = self._run(send)
        if not isinstance(rows, psycopg.DataError):
            self._answers(batch, rows, answers, ttl, now)
        elif len(batch) == 1:  # the database refused this write's values
            answers[batch[0][0]] = StoreError(f"the database refused this outcome: {rows}")
        else:
            for sent in batch:  # each alone, to tell which the database refused
                self._store_batch([sent], answers, ttl, now)

    @staticmethod
    def _answers(
        part: list[_Sent],
        rows: list[Any],
        answers: list[Job | Exception | None],
        ttl: float,
        now: float,
    ) -> None:
        """Each write's answer from ``RECORD_OUTCOMES``'s rows (its job before the batch),
        in order: a job's second write in the batch answers the job as both left it."""
        jobs: dict[str, Job] = {}
        for (i, write, values), (_, owned, stored, *job_row) in zip(part, rows, strict=True):
            if not stored:
                answers[i] = _exists(write) if owned else None
                continue
            job = jobs.get(write.job_id) or job_from_row(job_row)
            done, failed = job.targets_done + 1, job.targets_failed + (values[2] is not None)
            status = job.status
            if status.is_live and done >= job.targets_total:
                status = final_status(job.targets_total, failed)
            job = dataclasses.replace(
                job,
                status=status,
                targets_done=done,
                targets_failed=failed,
                updated_at=now,
                expires_at=now + ttl,
            )
            jobs[write.job_id] = answers[i] = job

    def _recognise_retries(
        self, conn: Conn, batch: list[_Sent], answers: list[Job | Exception | None], now: float
    ) -> None:
        """A retried write whose first attempt committed (its answer lost with the
        connection) finds its very outcome stored: it answers the job as it is now."""
        for i, write, values in batch:
            key = (write.job_id, write.idx)
            if not isinstance(answers[i], OutcomeExists) or key not in self._maybe_committed:
                continue
            if conn.execute(wq.GET_OUTCOME, key).fetchone() == values:
                row = conn.execute(q.GET_JOB, (write.job_id, now)).fetchone()
                answers[i] = None if row is None else job_from_row(row)

    def _outcomes_params(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float
    ) -> dict[str, Any]:
        """``RECORD_OUTCOMES``'s parameters for ``writes`` (distinct targets); ValueError for
        a write that cannot be stored (see :func:`write_values`)."""
        columns: dict[str, list[Any]] = {
            name: [] for name, _ in wq.OUTCOMES_ARGS if name not in ("now", "expires", "runner")
        }
        for write in writes:
            status, result, error, hint = write_values(write)
            columns["job_ids"].append(write.job_id)
            columns["idxs"].append(write.idx)
            columns["statuses"].append(status.value)
            columns["results"].append(result)
            columns["errors"].append(error)
            columns["hints"].append(hint)
            columns["attempts"].append(write.attempts)
            columns["failed"].append(int(error is not None))
            columns["sizes"].append(0 if result is None else len(result))
        return {**columns, "now": now, "expires": now + ttl, "runner": self.runner_id}

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
        off): its answer may need its stored outcome read."""
        return any((w.job_id, w.idx) in self._maybe_committed for w in writes)

    def lost_in_commit(self, writes: Sequence[OutcomeWrite]) -> None:
        """The connection was lost while ``writes`` were being committed: they may have been."""
        self._maybe_committed.update((w.job_id, w.idx) for w in writes)
