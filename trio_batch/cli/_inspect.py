"""The commands that read a store and tidy it: ``status``, ``results``, ``jobs``, ``forget``
and ``gc``. Each takes the open store and the parsed arguments and returns the exit code."""

from __future__ import annotations

import argparse
import json
import sys
import time

import trio

from .._errors import JobGone, JobLive
from .._model import Job
from .._text import printable_json
from ..runner import export_targets
from ..store import JobStore
from ._batch_data import job_filter
from ._common import (
    EXIT_DONE,
    EXIT_FAILED,
    ask,
    print_json,
    report_error,
    stderr_console,
    stdout_console,
)
from ._run import default_caller
from ._snapshots import collect_snapshots

__all__ = ["GC_BATCH", "cmd_forget", "cmd_gc", "cmd_jobs", "cmd_results", "cmd_status"]

#: Lapsed jobs deleted per transaction by `trio-batch gc`.
GC_BATCH = 100


def _get_job(store: JobStore, job_id: str) -> Job | None:
    """The job, or None having said that there is none."""
    job = ask(store, lambda s: s.get_job(job_id, now=time.time()))
    if job is None:
        report_error(f"no job {job_id} in {store.location} (unknown id, or its lease has lapsed)")
    return job


def cmd_status(store: JobStore, args: argparse.Namespace) -> int:
    """``trio-batch status JOB``: the job's details and a table of its targets, read a page
    at a time (a line of each result kept); 1 for an unknown job, or one deleted meanwhile."""
    from . import _console

    job = _get_job(store, args.job)
    if job is None:
        return EXIT_FAILED
    try:
        rows = ask(store, lambda s: _console.read_rows(s, job))
    except JobGone as exc:
        report_error(str(exc))
        return EXIT_FAILED
    out = stdout_console()
    out.print(_console.job_details(job))
    out.print()
    out.print(_console.results_table(rows))
    return EXIT_DONE


def cmd_results(store: JobStore, args: argparse.Namespace) -> int:
    """``trio-batch results JOB``: each target's outcome, read a page at a time as an export
    reads it (pages bounded by their results' size), so a job of big results is never held
    whole; 1 for an unknown job, or one deleted while it was read."""
    from . import _console

    job = _get_job(store, args.job)
    if job is None:
        return EXIT_FAILED
    out = stdout_console()

    async def each() -> None:
        assert job is not None
        # --json: the document print_json would make of the whole job, a target at a time.
        if args.json:
            sys.stdout.write('{\n  "job": ' + _json_at(job.to_json(), 2) + ',\n  "targets": [')
        first = True
        async for _, target in export_targets(store, job, now=time.time()):
            if args.json:
                sys.stdout.write(
                    ("\n" if first else ",\n") + "    " + _json_at(target.to_json(), 4)
                )
            else:
                _console.print_results(out, [target])
            first = False
        if args.json:
            sys.stdout.write(("]" if first else "\n  ]") + "\n}\n")

    try:
        trio.run(each)
    except JobGone as exc:
        report_error(f"{exc}: the results shown are incomplete")
        return EXIT_FAILED
    return EXIT_DONE


def _json_at(obj: object, indent: int) -> str:
    """``obj`` as ``print_json`` writes it, for a place ``indent`` spaces in."""
    text = printable_json(json.dumps(obj, ensure_ascii=False, indent=2))
    return text.replace("\n", "\n" + " " * indent)


def cmd_jobs(store: JobStore, args: argparse.Namespace) -> int:
    """``trio-batch jobs``: the unexpired jobs, most recently active first, or a caller's
    jobs that the filters list, newest first; a table or ``--json``."""
    from . import _console

    where = job_filter(args)
    if where is None:
        jobs = ask(
            store, lambda s: s.list_jobs(caller=args.caller, limit=args.limit, now=time.time())
        )
    else:  # a caller's own jobs, newest first, read off the filter's index
        caller = args.caller if args.caller is not None else default_caller()
        jobs = ask(
            store,
            lambda s: s.list_caller_jobs(caller, now=time.time(), limit=args.limit, where=where),
        )
    if args.json:
        print_json([job.to_json() for job in jobs])
    elif not jobs:
        stderr_console().print("no jobs", markup=False)
    else:
        stdout_console().print(_console.jobs_table(jobs))
    return EXIT_DONE


def cmd_forget(store: JobStore, args: argparse.Namespace) -> int:
    """``trio-batch forget JOB``: delete an ended job and its results; 1 for an unknown or
    live job."""
    try:
        job = ask(store, lambda s: s.forget_job(args.job, now=time.time()))
    except JobLive as exc:
        report_error(f"{exc} (trio-batch run is still working on it)")
        return EXIT_FAILED
    if job is None:
        report_error(f"no job {args.job} in {store.location} (unknown id, or its lease has lapsed)")
        return EXIT_FAILED
    print(f"forgot job {job.id} ({job.status}, {job.targets_total} target(s))")
    return EXIT_DONE


def cmd_gc(store: JobStore, args: argparse.Namespace) -> int:
    """``trio-batch gc``: purge the lapsed jobs, a batch per transaction, and collect the
    snapshots nothing keeps."""

    async def purge() -> int:
        purged = 0
        while True:
            batch = await store.purge_expired(now=time.time(), batch_size=GC_BATCH)
            purged += batch
            if batch < GC_BATCH:
                return purged
            # A store call runs to completion and never takes a Ctrl-C: take it here.
            await trio.lowlevel.checkpoint_if_cancelled()

    purged = trio.run(purge)
    print(f"purged {purged} expired job(s)")
    collected = collect_snapshots(store, args)
    if collected is not None:
        print(f"deleted {collected[0]} snapshot(s) and {collected[1]} unused body file(s)")
    return EXIT_DONE
