"""Running body processing where it can be bounded and killed.

Regular expressions, jq programs, HTML parsing and PDF extraction are CPU work that holds the
GIL and cannot be interrupted in a thread: one catastrophic pattern such as ``(.+)+Z`` would
freeze the event loop and every request beside it. So processing runs in a worker process
(trio-parallel) that trio kills when the target's processing deadline passes, with a memory
limit (``RLIMIT_AS``) and a CPU-time limit (``RLIMIT_CPU``) set in the worker for each target.

A body that needs no processing is only decoded: in-line when small (no process hop on the
common path), in a thread when large (linear work, bounded by the fetcher's ``max_bytes``).
"""

from __future__ import annotations

import functools
import logging
import math
import resource
from typing import Any

import trio
import trio_parallel

from ._body import Body, process_body
from ._errors import ContentError
from ._options import Plan

__all__ = ["LARGE_BODY", "needs_worker", "process_bounded"]

#: Bodies larger than this (bytes) are decoded off the event loop even without processing.
LARGE_BODY = 256 * 1024


def needs_worker(plan: Plan, body: Body) -> bool:
    """Whether processing ``body`` as ``plan`` says is work that must be bounded (not decode)."""
    return bool(
        plan.grep is not None
        or plan.jq
        or plan.html_to_text
        or body.content_type == "application/pdf"
        or body.data.startswith(b"%PDF-")
    )


async def process_bounded(
    plan: Plan, body: Body, context_lines: int, *, seconds: float, memory: int
) -> tuple[str, dict[str, Any]]:
    """:func:`process_body`, in a worker process killed after ``seconds`` or past ``memory``.

    Raises :class:`ContentError` with a hint when the processing runs out of time or memory.
    On cancellation the worker is killed and Cancelled propagates.
    """
    if not needs_worker(plan, body):
        if len(body.data) <= LARGE_BODY:
            return process_body(plan, body, context_lines)
        return await trio.to_thread.run_sync(
            functools.partial(process_body, plan, body, context_lines),
            abandon_on_cancel=True,  # pure computation: nothing to clean up if we stop waiting
        )
    cpu = max(1, math.ceil(seconds))
    with trio.move_on_after(seconds) as deadline:
        try:
            processed: tuple[str, dict[str, Any]] = await trio_parallel.run_sync(
                _process_limited, plan, body, context_lines, cpu, memory, kill_on_cancel=True
            )
            return processed
        except MemoryError:
            raise _out_of_memory(body.url, memory) from None
        except trio_parallel.BrokenWorkerError:
            # The worker died: killed by RLIMIT_CPU (SIGXCPU), or by a library aborting when
            # an allocation failed under RLIMIT_AS.
            raise ContentError(
                f"processing {body.url} stopped: it went past the limit of {cpu} s of CPU "
                f"time or {memory // (1024 * 1024)} MiB of memory",
                hint=_HINT,
            ) from None
    assert deadline.cancelled_caught
    raise ContentError(
        f"processing {body.url} took longer than {seconds:g} s and was stopped",
        hint=_HINT,
    )


_HINT = (
    "the grep pattern, jq program or document is too costly for this body; simplify the "
    "pattern (avoid nested repeats like '(.+)+'), narrow the jq program, or fetch a smaller "
    "resource"
)


def _out_of_memory(url: str, memory: int) -> ContentError:
    return ContentError(
        f"processing {url} ran out of memory (limit {memory // (1024 * 1024)} MiB)",
        hint=_HINT,
    )


def _quiet_worker_logging() -> None:
    """Keep libraries' log records in the worker off the terminal.

    The worker has no logging set up, so Python's last-resort handler would print pypdf's
    warnings about a damaged file, bare, straight into the command's progress lines; what
    matters of them is the target's outcome, which is returned.
    """
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())


def _process_limited(
    plan: Plan, body: Body, context_lines: int, cpu_seconds: int, memory: int
) -> tuple[str, dict[str, Any]]:
    """In the worker: limit this process's CPU time and memory, then process the body.

    Both limits are counted from what the worker already uses, and the processing libraries
    are loaded before they apply: a limit must bound the target's work, not refuse to map a
    library (a jq loaded for the first time under a low address-space limit fails to load, an
    ImportError that says nothing about the target).
    """
    _quiet_worker_logging()
    _load_processing_libraries()
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft_cpu = math.ceil(used.ru_utime + used.ru_stime) + cpu_seconds
    _, hard_cpu = resource.getrlimit(resource.RLIMIT_CPU)
    if hard_cpu == resource.RLIM_INFINITY or soft_cpu <= hard_cpu:
        resource.setrlimit(resource.RLIMIT_CPU, (soft_cpu, hard_cpu))
    soft_as = _address_space() + memory
    _, hard_as = resource.getrlimit(resource.RLIMIT_AS)
    if hard_as == resource.RLIM_INFINITY or soft_as <= hard_as:
        resource.setrlimit(resource.RLIMIT_AS, (soft_as, hard_as))
    return process_body(plan, body, context_lines)


def _load_processing_libraries() -> None:
    """Import what processing may load lazily (once per worker; later calls cost nothing)."""
    import bs4  # noqa: F401 - HTML to text
    import jq  # noqa: F401 - jq programs
    import pypdf  # noqa: F401 - PDF text


def _address_space() -> int:
    """Bytes of address space this process maps now (0 where /proc cannot tell)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * resource.getpagesize()
