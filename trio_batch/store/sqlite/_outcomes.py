"""The SQLite store's outcome writes: one outcome, or several in one shared commit.

Each write is a compare-and-set against the job as its writer saw it (``seen``): when the job
is still as seen, the outcome is stored before its job's bump and no savepoint is needed;
otherwise the job is read back as it is. See :meth:`StoreOutcomes.record_outcome`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from ..._errors import OutcomeExists, StoreError
from ..._model import Job, JobState, OutcomeWrite, Result, TargetState, final_status
from .._protocol import STORED, Stored
from .._rows import job_after_outcome, outcome_values, seen_counts
from .._rows import job_from_row as _job
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
        seen: Job | None = None,
        max_result_size: int | None = None,
        stored_since: tuple[int, int] | None = None,
    ) -> Job | Stored | None:
        """Store one target's outcome and bump its job, in one transaction.

        Pass ``result`` for a success, or ``error`` (and optionally ``hint``) for a failure;
        ``attempts`` is how many attempts the outcome took. A
        result that cannot be stored as JSON, or whose JSON is longer than ``max_result_size``
        characters, is stored as a failure saying why. In the same
        transaction the job's ``targets_done`` (and ``targets_failed``), ``updated_at`` and lease
        (``expires_at = now + ttl``) are bumped; if this was the last outcome of a live job, the
        job takes its terminal status: ``done`` (no failures), ``failed`` (all failed) or
        ``partial``.

        Returns the updated job, or None if the job is unknown or its lease has lapsed (nothing
        is written then). Raises :class:`OutcomeExists` if the target already has an outcome or
        does not exist.

        ``seen``, the job as this store last answered for it, saves reading the job back: the
        bump is then made only if every column of the job that can change is still as seen (but
        for its lease), and the answer follows from it. If the job changed meanwhile, it is
        bumped and read back as without ``seen``; the answer is the same either way. With
        ``stored_since`` (see :class:`~trio_batch.OutcomeWrite`) the job as seen is ``seen``
        with those outcomes counted in, and a write that matched it and leaves the job live
        answers :data:`~trio_batch.store.STORED` instead of the job.
        """
        failure = error is not None
        status, result_text, error, hint = outcome_values(result, error, hint, max_result_size)
        if failure != (error is not None):  # a result stored as a failure: the writer is told
            stored_since = None
        now = time.time() if now is None else now
        with self.transaction():
            return self._write_outcome(
                job_id,
                idx,
                status,
                result_text,
                error,
                hint,
                attempts,
                ttl,
                now,
                seen,
                stored_since,
            )

    def _write_outcome(
        self,
        job_id: str,
        idx: int,
        status: TargetState,
        result_text: str | None,
        error: str | None,
        hint: str | None,
        attempts: int,
        ttl: float,
        now: float,
        seen: Job | None,
        stored_since: tuple[int, int] | None = None,
    ) -> Job | Stored | None:
        """:meth:`record_outcome`'s writes, inside a transaction: all of them or none (it
        raises :class:`OutcomeExists` having written nothing).

        With the job as seen, the outcome is stored first, only if the job is still as seen
        (one statement), and the bump then cannot miss: a write that misses has written
        nothing, so it needs no savepoint. Only the fallback does: its bump comes first.
        """
        failed = int(error is not None)
        conn = self.db.conn  # the hot path: straight to sqlite3, no wrapper per statement
        size = 0 if result_text is None else len(result_text)
        # A member's _value_, its plain str: sqlite3 binds a str subclass through its adapter
        # lookup (about 1 µs each), and the .value property costs more than _value_.
        values = (status._value_, result_text, error, hint, now, attempts, job_id, idx)
        if seen is not None and seen.id == job_id:
            counts = seen_counts(seen, stored_since)
            if (
                conn.execute(
                    q.STORE_OUTCOME_AS_SEEN,
                    (
                        *values,
                        job_id,
                        now,
                        seen.status._value_,
                        seen.error,
                        *counts,
                        seen.created_at,
                        seen.targets_total,
                        seen.caller,
                        seen.caller_class,
                        seen.idem_key,
                    ),
                ).rowcount
                == 1
            ):
                return self._bump_seen(job_id, seen, counts, failed, size, ttl, now, stored_since)
        with self.transaction():  # a savepoint: the bump comes before a refusal
            row = conn.execute(q.BUMP_JOB, (failed, size, now, now + ttl, job_id, now)).fetchone()
            if row is None:
                return None
            job = _job(row)
            if job.targets_done >= job.targets_total and job.status.is_live:
                final = final_status(job.targets_total, job.targets_failed)
                self._settle(job_id, final, now)
                job = dataclasses.replace(job, status=final)
            if conn.execute(q.STORE_OUTCOME, values).rowcount != 1:
                raise OutcomeExists(
                    f"target {idx} of job {job_id} already has an outcome or does not exist"
                )
        return job

    def _bump_seen(
        self,
        job_id: str,
        seen: Job,
        counts: tuple[int, int],
        failed: int,
        size: int,
        ttl: float,
        now: float,
        stored_since: tuple[int, int] | None,
    ) -> Job | Stored:
        """The bump of a write stored as seen (``counts``: its job's done and failed before
        it; ``failed``: 1 for a failure), the terminal status if it was the last, the answer."""
        if (
            self.db.conn.execute(q.BUMP_SEEN_JOB, (failed, size, now, now + ttl, job_id)).rowcount
            != 1
        ):
            raise StoreError(f"job {job_id} vanished inside its outcome's transaction")
        done, failed = counts[0] + 1, counts[1] + failed
        live = seen.status.is_live
        if done < seen.targets_total or not live:
            if stored_since is not None and live:
                return STORED  # the writer counts it into its view: no job built
            return job_after_outcome(seen, done=done, failed=failed, now=now, ttl=ttl)
        final = final_status(seen.targets_total, failed)
        self._settle(job_id, final, now)
        return job_after_outcome(seen, done=done, failed=failed, now=now, ttl=ttl, status=final)

    def _settle(self, job_id: str, final: JobState, now: float) -> None:
        """The last outcome's terminal status and event, in its transaction. (Kept out of the
        bump, so the status index is only touched once per job.)"""
        self.db.conn.execute(q.SET_STATUS, (final.value, job_id))
        self.db.conn.execute(q.EMIT_EVENT, (now, now, now, job_id))

    def record_outcomes(
        self, writes: Sequence[OutcomeWrite], *, ttl: float, now: float | None = None
    ) -> list[Job | Stored | Exception | None]:
        """Store several outcomes in one transaction (group commit); one answer per write.

        Each write is atomic on its own (see :meth:`_write_outcome`), and answers as
        :meth:`record_outcome` would: the updated job, :data:`~trio_batch.store.STORED`, None,
        or the exception it raised (such as :class:`OutcomeExists`) in place of a result. None
        of them is durable before the shared commit; if that commit fails, the error is raised
        and nothing is stored.
        """
        now = time.time() if now is None else now
        with self.transaction():
            return [self._shared_write(w, ttl, now) for w in writes]

    def _shared_write(
        self, w: OutcomeWrite, ttl: float, now: float
    ) -> Job | Stored | Exception | None:
        """One write of :meth:`record_outcomes`: its answer, or the error that refused it
        (having written nothing: see :meth:`_write_outcome`)."""
        try:
            status, text, error, hint = outcome_values(w.result, w.error, w.hint, w.max_result_size)
            # A result stored as a failure answers the job: its writer counts it as a success.
            since = w.stored_since if (error is None) == (w.error is None) else None
            return self._write_outcome(
                w.job_id,
                w.idx,
                status,
                text,
                error,
                hint,
                w.attempts,
                ttl,
                now,
                w.seen,
                since,
            )
        except (OutcomeExists, ValueError) as exc:
            return exc

    def record_write(self, w: OutcomeWrite, ttl: float, now: float) -> Job | Stored | None:
        """:meth:`record_outcome` of one :class:`OutcomeWrite`, in its own transaction."""
        return self.record_outcome(
            w.job_id,
            w.idx,
            result=w.result,
            error=w.error,
            hint=w.hint,
            attempts=w.attempts,
            ttl=ttl,
            now=now,
            seen=w.seen,
            max_result_size=w.max_result_size,
            stored_since=w.stored_since,
        )
