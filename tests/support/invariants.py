"""What a terminal job's status must be, given its stored outcomes (the hardening suites' check).

A job turns ``done``, ``partial`` or ``failed`` in the same commit as its last outcome, and only
then; ``cancelled`` may come at any point; a job reaped after its process died (error
``restart``) was necessarily still missing an outcome.

The rule is written out again here, not imported (``trio_batch._model.final_status``): an oracle
that called the code under test could not see a bug in it.
"""

from __future__ import annotations


def implied_status(total: int, done: int, failed: int) -> str | None:
    """The status a job's outcomes give it once all are stored; None while some are missing."""
    if done < total:
        return None
    if failed == 0:
        return "done"
    return "failed" if failed == total else "partial"


def status_mismatch(
    status: str, error: str | None, total: int, done: int, failed: int
) -> str | None:
    """Why a terminal job's status and error do not fit its outcomes; None if they do.

    ``done`` and ``failed`` are the job's stored outcomes and failed ones among them.
    """
    implied = implied_status(total, done, failed)
    if error == "restart":
        fits = status == "failed" and implied is None  # the last outcome would have finished it
    elif status == "cancelled":
        fits = error is None
    else:
        fits = error is None and status == implied
    if fits:
        return None
    return f"is {status} (error {error!r}) with {done} of {total} outcomes stored, {failed} failed"
