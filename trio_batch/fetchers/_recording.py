"""A job's snapshot and replay, as a caller asks for them at submit.

``POST /v1/batches`` takes ``"snapshot": true`` and ``"replay": {"job": ID, "on_miss":
"fetch", "revalidate": true}``; ``trio-batch run`` takes ``--snapshot``, ``--replay ID``,
``--on-miss fetch`` and ``--revalidate``. :class:`Recording` turns them into each target's
options (``snapshot``, ``replay``, ``on_miss``, ``revalidate``, see ``_recorded``), and
:func:`check_replays` refuses, at submit, a replay the caller may not make.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .._errors import InvalidRequest
from .._model import Target, is_job_id
from .._text import json_type, safe_text, unknown_keys
from ..store import JobStore
from ._recorded import ON_MISS
from ._snapshots import SnapshotStore

__all__ = ["Recording", "ReplayRefused", "check_replays"]


class ReplayRefused(InvalidRequest):
    """A replay that cannot be made: an unknown job (or another caller's), or one without a
    snapshot. Raised at submit, nothing stored; ``hint`` says what to do instead."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True, slots=True)
class Recording:
    """What a job asks of every target: keep its response (``snapshot``), take it from the
    snapshot of job ``replay``, and with it ``on_miss`` and ``revalidate``."""

    snapshot: bool = False
    replay: str = ""
    on_miss: str = ""
    revalidate: bool = False

    @classmethod
    def from_json(cls, body: Mapping[str, object]) -> Recording:
        """The ``snapshot`` and ``replay`` keys of a submit's body; raises
        :class:`InvalidRequest` for a wrongly shaped one."""
        snapshot = body.get("snapshot", False)
        if not isinstance(snapshot, bool):
            raise InvalidRequest(f"'snapshot' must be true or false, not {json_type(snapshot)}")
        replay = body.get("replay")
        if replay is None:
            return cls(snapshot=snapshot)
        if not isinstance(replay, Mapping):
            raise InvalidRequest(
                f"'replay' must be an object {{\"job\": ID}}, not {json_type(replay)}"
            )
        unknown = unknown_keys(replay, ("job", "on_miss", "revalidate"))
        if unknown:
            raise InvalidRequest(
                f"unknown key(s) {unknown} in 'replay'; it has 'job' and optionally 'on_miss' "
                "and 'revalidate'"
            )
        job, on_miss = replay.get("job"), replay.get("on_miss", "")
        revalidate = replay.get("revalidate", False)
        if not is_job_id(job):
            raise InvalidRequest(f"replay's 'job' must be a job id, not {safe_text(job, 80)!r}")
        if on_miss not in ON_MISS:
            raise InvalidRequest(
                f"replay's 'on_miss' is 'fail' or 'fetch', not {safe_text(on_miss, 80)!r}"
            )
        if not isinstance(revalidate, bool):
            raise InvalidRequest(
                f"replay's 'revalidate' must be true or false, not {json_type(revalidate)}"
            )
        assert isinstance(job, str) and isinstance(on_miss, str)
        return cls(snapshot, job, on_miss, revalidate)

    def apply(self, targets: Sequence[Target]) -> list[Target]:
        """``targets`` with these options set; a target that sets one of them otherwise
        raises :class:`InvalidRequest`."""
        if self == _NOTHING:
            return list(targets)
        wanted = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out = []
        for i, target in enumerate(targets):
            for name, value in wanted.items():
                own = getattr(target.options, name)
                if own and value and own != value:
                    raise InvalidRequest(
                        f"target {i} sets option {name!r} to {safe_text(own, 80)!r}, and the "
                        f"job to {safe_text(value, 80)!r}; set it in one place"
                    )
            changes = {name: value for name, value in wanted.items() if value}
            options = dataclasses.replace(target.options, **changes)
            out.append(Target(target.url, options, target.custom_id))
        return out


_NOTHING = Recording()


async def check_replays(
    snapshots: SnapshotStore | None,
    store: JobStore,
    caller: str,
    targets: Sequence[Target],
    *,
    now: float,
) -> None:
    """Raise :class:`ReplayRefused` unless ``caller`` may replay every job ``targets`` name.

    A job can be replayed by its own caller while its lease lasts, and by anyone while it is
    pinned and shared (a pinned job is kept past its lease). Another caller's job reads as an
    unknown one, in the same words. Cancellation: nothing is written; nothing is left.
    """
    for job_id in sorted({t.options.replay for t in targets if t.options.replay}):
        await _check_replay(snapshots, store, caller, job_id, now)


async def _check_replay(
    snapshots: SnapshotStore | None, store: JobStore, caller: str, job_id: str, now: float
) -> None:
    unknown = ReplayRefused(
        f"no job {job_id} to replay (unknown id, or its lease has lapsed)",
        hint="replay a job of yours that was submitted with snapshot: true, or one pinned "
        "and shared",
    )
    owner = None if snapshots is None else await snapshots.owner(job_id)
    if owner is not None and owner.pinned and owner.readable_by(caller):
        return
    job = await store.get_job(job_id, now=now)
    if job is None or job.caller != caller:
        raise unknown
    if owner is None or owner.caller != caller:
        raise ReplayRefused(
            f"job {job_id} has no snapshot to replay: it was not submitted with snapshot: true, "
            "or has fetched nothing yet",
            hint="submit the targets again with snapshot: true, then replay that job",
        )
