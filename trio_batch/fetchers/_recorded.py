"""A target's body from the network or from a snapshot: the options ``snapshot``, ``replay``,
``on_miss`` and ``revalidate`` of the built-in fetcher.

- ``snapshot``: the response is kept in the job's snapshot (see ``_snapshots``) before it is
  processed.
- ``replay`` (a job id): the response comes from that job's snapshot, never the network; the
  target's own options (mode, grep, jq, pages) process it. A target missing from the snapshot
  fails with :class:`SnapshotMiss`, unless ``on_miss`` is ``fetch``. Only the snapshot's
  caller may replay it, or anyone once it is pinned and shared; any other snapshot reads as
  missing, exactly as one that does not exist.
- ``revalidate`` (with ``replay``): the target is fetched again with ``If-None-Match`` /
  ``If-Modified-Since`` from the snapshot; a 304 answer reuses the kept bytes.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .._model import Options, Target, is_job_id
from ..runner import current_caller, current_job
from ._answers import status_error_of
from ._body import Body
from ._errors import OptionError
from ._options import shown
from ._provenance import header
from ._snapshot_entry import Entry
from ._snapshots import SnapshotMiss, SnapshotStore

__all__ = ["ON_MISS", "Obtained", "check_recording", "obtain"]

#: What a replayed target missing from its snapshot does: fail (the default) or be fetched.
ON_MISS = ("", "fail", "fetch")

#: Fetch a URL's body; with validators ``(etag, last_modified)``, a conditional request
#: that answers None for a 304; with ``keep_errors``, a 4xx or 5xx answer is a body too.
Fetch = Callable[[str, tuple[str | None, str | None] | None, bool], Awaitable[Body | None]]


@dataclass(frozen=True, slots=True)
class Obtained:
    """A target's body, when it was fetched, and what ``meta`` says of where it came from."""

    body: Body
    fetched_at: float
    meta: dict[str, Any]


def check_recording(options: Options, snapshots: SnapshotStore | None) -> None:
    """Raise :class:`OptionError` if ``options``' snapshot options are bad or the fetcher has
    nowhere to keep snapshots. Quick, no I/O: the submit-time hook calls it."""
    if options.on_miss not in ON_MISS:
        raise OptionError(
            f"unknown on_miss {shown(options.on_miss)}",
            option="on_miss",
            hint="on_miss is 'fail' (the default: a target missing from the snapshot fails) or "
            "'fetch' (it is fetched from the network)",
        )
    if (options.on_miss or options.revalidate) and not options.replay:
        option = "on_miss" if options.on_miss else "revalidate"
        raise OptionError(
            f"option {option!r} needs 'replay'",
            option=option,
            hint="name the job whose snapshot to replay with 'replay', or drop the option",
        )
    if options.replay and not is_job_id(options.replay):
        raise OptionError(
            f"replay {shown(options.replay)} is not a job id",
            option="replay",
            hint="replay takes the id of a job submitted with snapshot: true",
        )
    if (options.snapshot or options.replay) and snapshots is None:
        option = "snapshot" if options.snapshot else "replay"
        raise OptionError(
            f"option {option!r} needs a snapshot directory, and this fetcher has none",
            option=option,
            hint="on PostgreSQL, give the runners a shared directory with --snapshot-dir",
        )


async def obtain(
    target: Target,
    snapshots: SnapshotStore | None,
    fetch: Fetch,
    now: Callable[[], float],
    max_bytes: int,
    counts: collections.Counter[str],
) -> Obtained:
    """The body of ``target``, from the network (``fetch``) or a snapshot as its options say,
    kept in its job's snapshot when it asks for it. ``counts`` counts each outcome:
    ``recorded``, ``replayed``, ``replay_missed``, ``not_modified``, ``modified``.

    Raises :class:`SnapshotMiss` for a replayed target missing from its snapshot,
    :class:`~trio_batch.fetchers._snapshots.SnapshotFull` past the snapshots' bound, or what
    ``fetch`` raises. Cancellation: a snapshot write in progress completes (see
    ``_snapshots``); nothing else is left.
    """
    options = target.options
    check_recording(options, snapshots)
    if options.replay:
        assert snapshots is not None  # check_recording
        got = await _replayed(target, snapshots, fetch, now, max_bytes, counts)
    else:
        body = await fetch(target.url, None, options.snapshot)
        assert body is not None  # no validators, no 304
        got = Obtained(body, now(), {})
    if options.snapshot:
        assert snapshots is not None
        job_id, caller = current_job(), current_caller()
        if job_id is None or caller is None:
            raise OptionError(
                "option 'snapshot' keeps a job's responses: only a runner's jobs have one",
                option="snapshot",
                hint="submit the target to a runner, or drop 'snapshot'",
            )
        await snapshots.record(job_id, caller, target.url, got.body, got.fetched_at)
        counts["recorded"] += 1
    _raise_for_status(got.body)
    return got


def _raise_for_status(body: Body) -> None:
    """Raise the error a 4xx or 5xx answer is, kept or replayed as the network gave it."""
    status = body.status_code
    if status is not None and status >= 400:
        retry_after = header(body.headers, "retry-after")
        raise status_error_of(status, body.reason, body.url, retry_after)


async def _replayed(
    target: Target,
    snapshots: SnapshotStore,
    fetch: Fetch,
    now: Callable[[], float],
    max_bytes: int,
    counts: collections.Counter[str],
) -> Obtained:
    options = target.options
    job_id = options.replay
    found: tuple[Entry, bytes] | None = None
    owner = await snapshots.owner(job_id)
    if owner is not None and owner.readable_by(current_caller()):
        found = await snapshots.lookup(job_id, target.url, max_bytes)
    if found is None:
        counts["replay_missed"] += 1
        if options.on_miss != "fetch":
            raise SnapshotMiss(
                f"{target.url} is not in the snapshot of job {job_id}",
                hint="replay only targets the recorded job fetched, or set on_miss: 'fetch' "
                "to fetch the missing ones from the network",
            )
        body = await fetch(target.url, None, options.snapshot)
        assert body is not None
        return Obtained(body, now(), {"replayed": False, "replay_miss": job_id})
    entry, data = found
    if not options.revalidate:
        counts["replayed"] += 1
        return Obtained(entry.body(data), entry.fetched_at, {"replayed": True, "replay": job_id})
    validators = (header(entry.headers, "etag"), header(entry.headers, "last-modified"))
    fresh = await fetch(target.url, validators, options.snapshot)
    counts["not_modified" if fresh is None else "modified"] += 1
    if fresh is None:  # 304: the kept bytes are still the page
        meta = {"replayed": True, "replay": job_id, "revalidated": "not_modified"}
        return Obtained(entry.body(data), now(), meta)
    return Obtained(fresh, now(), {"replayed": False, "replay": job_id, "revalidated": "modified"})
