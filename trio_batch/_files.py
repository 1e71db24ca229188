"""Reading a file a user names (a batch file, a tokens file): regular files only, bounded."""

from __future__ import annotations

import os
import stat

__all__ = ["read_bounded"]


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
