"""Running the ``trio-batch`` command in this process, as its console script would run it.

A subprocess pays the interpreter's start and the package's imports (half a second of CPU)
for every command; the tests that check what a command prints and how it exits do not need
that. :func:`run_cli` calls the same :func:`trio_batch.cli.main` with its own standard
streams (byte buffers, not terminals, as a pipe is), its own environment, and exit codes and
uncaught tracebacks turned into a :class:`subprocess.CompletedProcess` as the process would
give. Tests whose point is the process itself (signals, a terminal, ``/dev/stdout``, the
console script, ``serve``) still start one.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence

from trio_batch.cli import main

__all__ = ["run_cli"]


def _stream(data: bytes = b"", *, errors: str = "strict") -> io.TextIOWrapper:
    # What Python gives a process whose standard streams are pipes, in a UTF-8 locale.
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors=errors, newline="\n")


def _text(stream: io.TextIOWrapper) -> str:
    """What ``subprocess.run(text=True)`` reads from the pipe: decoded, universal newlines."""
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return io.TextIOWrapper(io.BytesIO(buffer.getvalue()), encoding="utf-8").read()


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved, wanted = dict(os.environ), dict(env)  # env may be os.environ itself
    os.environ.clear()
    os.environ.update(wanted)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _exit_code(exc: SystemExit, stderr: io.TextIOWrapper) -> int:
    # As the interpreter turns sys.exit(x) into the process's exit status.
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=stderr)
    return 1


def run_cli(
    args: Sequence[str], *, stdin: str | None, env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run ``trio-batch ARGS`` to completion in this process; stdout and stderr are captured.

    The environment is ``env`` for the command's duration, and the standard streams are
    buffers (``stdin`` empty when None, as ``/dev/null``). A ``KeyboardInterrupt`` from the
    test itself propagates.
    """
    out, err = _stream(), _stream(errors="backslashreplace")
    streams = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = _stream((stdin or "").encode()), out, err
    try:
        with _environment(env):
            try:
                code = main(list(args))
            except SystemExit as exc:
                code = _exit_code(exc, err)
            except Exception:
                traceback.print_exc(file=err)  # as the interpreter prints an uncaught error
                code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
    return subprocess.CompletedProcess(
        ["trio-batch", *args], code, stdout=_text(out), stderr=_text(err)
    )
