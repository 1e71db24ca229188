"""The SQLite store's outcome writes: one outcome, or several in one shared commit.

Each write stores its outcome first, in one statement that matches only while the target is
pending and its job unexpired; the job's bump then cannot miss. A write refused writes
nothing, so the writes of a shared commit need no savepoint each.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from ..._errors import OutcomeExists
from ..._model import Job, JobState, OutcomeWrite, Result, final_status, is_job_id
from .._rows import job_from_row as _job
from .._rows import outcome_values
from . import _queries as q
from ._reads import StoreReads

__all__ = ["StoreOutcomes"]


class StoreOutcomes(StoreReads):
    """The outcome writes of :class:`~trio_batch.store.sqlite.Store` (its base class)."""

    def record_outcome(
        self,
        job_id: str,
        idx: int,
        *,
        result: Result | None = None,
        error: str | None = None,
        hint: str | None = None,
        attempts: int = 1,
        ttl: float,
        now: float | None = None,
        max_result_size: int | None = None,
    ) -> Job | None:
        """Store one target's outcome and bump its job, in one transaction.

        Pass ``result`` for a success, or ``error`` (and optionally ``hint``) for a failure;
        ``attempts`` is how many attempts the outcome took. A result that cannot be stored as
        JSON, or whose JSON is longer than ``max_result_size`` characters, is stored as a
        failure saying why. In the same transaction the job's ``targets_done`` (and
        ``targets_failed``), ``updated_at`` and lease (``expires_at = now + ttl``) are bumped;
        if this was the last outcome of a live job, the job takes its terminal status:
        ``done`` (no failures), ``failed`` (all failed) or ``partial``.

        Returns the updated job, or None if the job is unknown or its lease has lapsed (nothing
        is written then). Raises :class:`OutcomeExists` if the target already has an outcome or
        does not exist.
        """
        write = OutcomeWrite(job_id, idx, result, error, hint, attempts, max_result_size)
        now = time.time() if now is None else now
        with self.transaction():
            return self._write_outcome(write, ttl, now)

    def record_outcomes(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float | None = None
    ) -> list[Job | Exception | None]:
        """Store several outcomes in one transaction (group commit); one answer per write.

        Each write is atomic on its own, and answers as :meth:`record_outcome` would: the
        updated job, None, or the exception it raised (such as :class:`OutcomeExists`) in
        place of a result. None of them is durable before the shared commit; if that commit
        fails, the error is raised and nothing is stored.
        """
        now = time.time() if now is None else now
        answers: list[Job | Exception | None] = []
        with self.transaction():
            for write in writes:
                try:
                    answers.append(self._write_outcome(write, ttl, now))
                except (OutcomeExists, ValueError) as exc:
                    answers.append(exc)
        return answers

    def _write_outcome(self, w: OutcomeWrite, ttl: float, now: float) -> Job | None:
        """One write, inside a transaction: stored whole, or refused having written nothing
        (None for an unknown or lapsed job; :class:`OutcomeExists`)."""
        status, result_text, error, hint = outcome_values(
            w.result, w.error, w.hint, w.max_result_size
        )
        if not is_job_id(w.job_id):  # no such job (nor, maybe, text SQLite takes)
            return None
        conn = self.db.conn
        size = 0 if result_text is None else len(result_text)
        values = (status.value, result_text, error, hint, now, w.attempts, w.job_id, w.idx, size)
        if conn.execute(q.STORE_OUTCOME, values).rowcount != 1:
            if conn.execute(q.GET_JOB, (w.job_id, now)).fetchone() is None:
                return None
            raise OutcomeExists(
                f"target {w.idx} of job {w.job_id} already has an outcome or does not exist"
            )
        bump = (int(error is not None), size, now, now + ttl, w.job_id, now)
        job = _job(conn.execute(q.BUMP_JOB, bump).fetchone())  # found unexpired just now
        if job.targets_done >= job.targets_total and job.status.is_live:
            final = final_status(job.targets_total, job.targets_failed)
            self._settle(w.job_id, final, now)
            job = dataclasses.replace(job, status=final)
        return job

    def _settle(self, job_id: str, final: JobState, now: float) -> None:
        """The last outcome's terminal status and event, in its transaction."""
        self.db.conn.execute(q.SET_STATUS, (final.value, job_id))
        self.db.conn.execute(q.EMIT_EVENT, (now, now, now, job_id))
