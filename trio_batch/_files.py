"""Files a user names: reading one (a batch file, a tokens file: regular files only, bounded),
and writing one (an export) whole or not at all, without replacing what it is."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["read_bounded", "replacing"]


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them.

    Raises ValueError, before reading anything, for what is not a regular file (``/dev/zero``
    or a FIFO would be read for ever; a FIFO is opened without waiting for a writer), and for
    a file of more than ``limit`` bytes; OSError if it cannot be opened or read.
    """
    name = os.fspath(path)
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{name} is not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{name} holds more than {_size(limit)}")
    return data


def _size(limit: int) -> str:
    mib = 1024 * 1024
    return f"{limit // mib} MiB" if limit % mib == 0 else f"{limit} bytes"


#: How stale parts are named: ``.<name>.<random>.part`` beside the file they would replace.
_PART_SUFFIX = ".part"


@contextlib.contextmanager
def replacing(
    path: str | os.PathLike[str], *, binary: bool = False
) -> Iterator[tuple[IO[Any], bool]]:
    """Open ``path`` to be written as text (as bytes if ``binary``); yields the stream and
    whether it is a regular file.

    - A regular file (or a new one) is written beside it and renamed into place when the block
      ends without an exception: it is replaced whole or not at all, and keeps its mode (a new
      one gets the umask's). An exception leaves the old file as it was.
    - A symlink is followed: its final target is replaced that way, the link kept.
    - A FIFO or character device (``/dev/stdout``, a terminal) is written to directly.
    - Anything else (a directory, a socket, a block device) raises OSError before anything is
      written.

    A part whose writer died (SIGKILL) is removed by the next write of the same file: a live
    writer holds an ``flock`` on its part. Raises OSError for what cannot be opened or written.
    """
    name = os.fspath(path)
    open_mode, encoding = ("wb", None) if binary else ("w", "utf-8")
    try:
        now: os.stat_result | None = os.stat(name)  # follows links, as the write will
    except FileNotFoundError:
        now = None
    mode = None if now is None else now.st_mode
    if mode is not None and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        with open(name, open_mode, encoding=encoding) as f:
            yield f, False
        return
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", name)
    if mode is not None and not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "neither a regular file nor a pipe or terminal", name)
    real = os.path.realpath(name)  # a symlink is written through, not replaced
    _remove_stale_parts(real)
    fd, part = _new_part(real)
    try:
        _take_mode(fd, now)
        with os.fdopen(fd, open_mode, encoding=encoding) as f:
            yield f, True
            f.flush()
            os.fsync(f.fileno())
            os.replace(part, real)  # while the lock is held: no cleaner takes a finished part
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise


def _new_part(real: str) -> tuple[int, str]:
    """A new part file beside ``real``, locked; retried if a cleaner took it before the lock."""
    folder, base = os.path.split(real)
    while True:
        fd, part = tempfile.mkstemp(dir=folder or ".", prefix=f".{base}.", suffix=_PART_SUFFIX)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.stat(part).st_ino == os.fstat(fd).st_ino:
                return fd, part
        except FileNotFoundError:
            pass  # a cleaner saw it unlocked and removed it: make another
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _remove_stale_parts(real: str) -> None:
    """Remove the parts of ``real`` that no live writer holds (their writer was killed)."""
    folder, base = os.path.split(real)
    prefix = f".{base}."
    try:
        names = [n for n in os.listdir(folder or ".") if n.startswith(prefix)]
    except OSError:
        return
    for n in names:
        if not n.endswith(_PART_SUFFIX) or len(n) <= len(prefix) + len(_PART_SUFFIX):
            continue
        part = os.path.join(folder, n)
        try:
            fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.unlink(part)  # held by us: its writer is gone
        except OSError:
            pass  # held by a live writer, or already gone
        finally:
            os.close(fd)


def _take_mode(fd: int, now: os.stat_result | None) -> None:
    """Give the part the mode (and, where allowed, the owner) of the file it replaces, or a new
    file's mode: 0666 less the umask."""
    if now is None:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        return
    if (now.st_uid, now.st_gid) != (os.geteuid(), os.getegid()):
        with contextlib.suppress(OSError):  # only root may give a file away
            os.fchown(fd, now.st_uid, now.st_gid)
    os.fchmod(fd, stat.S_IMODE(now.st_mode))
