"""A shared commit's outcome writes as the PostgreSQL store sends them: each checked before
any SQL, each target sent once, and each write answered in order.

The store sends :attr:`OutcomeBatch.sent` as one statement, learns which writes it stored and
each job as the batch left it, and hands those to :meth:`OutcomeBatch.answer_stored`;
:meth:`OutcomeBatch.done` then gives one answer per write, as if the writes had been made
one after another (as SQLite's store makes them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ..._errors import OutcomeExists
from ..._model import Job, OutcomeWrite, final_status, is_job_id, is_target_index
from .._rows import write_values

__all__ = ["OutcomeBatch", "Sent"]


class Sent(NamedTuple):
    """A write to send: its place among the writes, and what it stores."""

    at: int
    write: OutcomeWrite
    status: str
    result: str | None
    error: str | None
    hint: str | None

    @property
    def values(self) -> tuple[str, str | None, str | None, str | None]:
        """The target's stored columns: status, result, error, hint."""
        return self.status, self.result, self.error, self.hint

    @property
    def idx(self) -> int:
        """The target's index as sent: one no target can have (negative, or past what the
        column holds, which could not even be bound) as -1, which no target has either."""
        return self.write.idx if is_target_index(self.write.idx) else -1

    @property
    def size(self) -> int:
        """What the write adds to its job's ``results_size`` (characters)."""
        return 0 if self.result is None else len(self.result)


@dataclass(slots=True)
class OutcomeBatch:
    """The writes of one commit: what to send, and the answers as they are learnt."""

    writes: Sequence[OutcomeWrite]
    #: One per write: the job as that write left it, None, or the exception that refused it.
    answers: list[Job | Exception | None]
    #: Each target's first write that can be stored, in order.
    sent: list[Sent] = field(default_factory=list)
    #: Every write that can be stored, in order: a target's later writes too.
    storable: list[Sent] = field(default_factory=list)
    #: A later write of a target already sent: its index, and the first's.
    repeats: list[tuple[int, int]] = field(default_factory=list)
    #: The writes that ended their job (its last outcome, the job live before).
    ended: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, writes: Sequence[OutcomeWrite]) -> OutcomeBatch:
        """``writes`` checked (one that cannot be stored answers its ValueError, one of no
        job id's shape None, nothing sent for either) and each target's first write kept to
        send."""
        batch = cls(writes, [None] * len(writes))
        first: dict[tuple[str, int], int] = {}
        for i, write in enumerate(writes):
            try:
                status, result, error, hint = write_values(write)
            except ValueError as exc:
                batch.answers[i] = exc
                continue
            if not is_job_id(write.job_id):  # no such job (nor text the database takes)
                continue
            sent = Sent(i, write, status.value, result, error, hint)
            batch.storable.append(sent)
            key = (write.job_id, write.idx)
            if key in first:
                batch.repeats.append((i, first[key]))
                continue
            first[key] = i
            batch.sent.append(sent)
        return batch

    def one_by_one(self) -> list[Sent]:
        """Every write that can be stored, to send one at a time (the database refused a
        value of the batch): each answered as it is made, a target's later writes too (one
        after a first the database refused may store it)."""
        self.repeats.clear()
        return self.storable

    def answer_stored(
        self, part: Sequence[Sent], stored: Collection[int], after: Mapping[str, Job]
    ) -> None:
        """Answer the writes of ``part`` (sent in one statement) whose indexes are in
        ``stored``, from each one's job as the statement left it (``after``: its counts and
        lease; its status as it was before, the statement having stored its end itself). A
        job's last write answers that job, ended if it is the job's last outcome; one before
        it, the job less the writes after it."""
        later: dict[str, tuple[int, int]] = {}  # job id: outcomes, failures after this write
        for sent in reversed(part):
            if sent.at not in stored:
                continue
            job_id = sent.write.job_id
            job = after[job_id]
            done, failed = later.get(job_id, (0, 0))
            if job_id in later:  # the job's later writes in the batch are not yet made
                job = dataclasses.replace(
                    job,
                    targets_done=job.targets_done - done,
                    targets_failed=job.targets_failed - failed,
                )
            elif job.status.is_live and job.targets_done >= job.targets_total:  # its last
                final = final_status(job.targets_total, job.targets_failed)
                job = dataclasses.replace(job, status=final)
                self.ended.add(sent.at)
            later[job_id] = (done + 1, failed + (sent.error is not None))
            self.answers[sent.at] = job

    def refuse(self, sent: Sent, *, job_known: bool) -> None:
        """``sent`` stored nothing: its job is unknown or lapsed (or not this runner's), or,
        ``job_known``, its target has an outcome already or does not exist."""
        self.answers[sent.at] = _exists(sent.write) if job_known else None

    def done(self) -> list[Job | Exception | None]:
        """Every write's answer: a repeated target's as its first write's was answered."""
        for i, first in self.repeats:
            self.answers[i] = None if self.answers[first] is None else _exists(self.writes[i])
        return self.answers


def _exists(write: OutcomeWrite) -> OutcomeExists:
    return OutcomeExists(
        f"target {write.idx} of job {write.job_id} already has an outcome or does not exist"
    )
