"""Reading ``file://`` URLs for the built-in fetcher: regular files only, size-bounded."""

from __future__ import annotations

import errno
import hashlib
import mimetypes
import os
import stat
from urllib.request import url2pathname

import trio

from ._body import Body
from ._errors import LocalFileError, URLError
from ._urls import response_too_large, split_url

__all__ = ["fetch_file"]


async def fetch_file(url: str, max_bytes: int) -> Body:
    """Read the local file ``url`` names, at most ``max_bytes``, in a worker thread.

    Cancellation: the thread is abandoned (a read cannot be interrupted) and the call raises at
    once, so the fetcher's timeout bounds a slow disk.
    """
    parts = split_url(url)
    if parts.netloc not in ("", "localhost"):
        raise URLError(
            f"{url} names host {parts.netloc!r}; file URLs can only name local files",
            hint="write file:///absolute/path (three slashes)",
        )
    path = url2pathname(parts.path)
    try:
        # A FIFO or device never gets as far as a read, see _read_file.
        read = await trio.to_thread.run_sync(_read_hashed, path, max_bytes, abandon_on_cancel=True)
    except FileNotFoundError:
        raise LocalFileError(
            f"no such file: {path}", hint="check the path; file URLs need an absolute path"
        ) from None
    except IsADirectoryError:
        raise LocalFileError(
            f"{path} is a directory", hint="name a file, not a directory"
        ) from None
    except OSError as exc:
        raise LocalFileError(
            f"cannot read {path}: {exc.strerror or exc}",
            hint="name a regular file the process may read (not a pipe or device), and "
            "check its permissions",
        ) from None
    if read is None:
        raise response_too_large(url, f"more than {max_bytes} bytes", max_bytes)
    data, digest = read
    content_type, encoding = mimetypes.guess_type(path)
    if encoding is not None:  # x.json.gz is gzip data, not JSON
        content_type = "application/octet-stream"
    return Body(url, None, content_type, None, data, 0, digest=digest)


def _read_hashed(path: str, max_bytes: int) -> tuple[bytes, str] | None:
    """:func:`_read_file` and the hex sha256 of what it read, both in the worker thread."""
    data = _read_file(path, max_bytes)
    return None if data is None else (data, hashlib.sha256(data).hexdigest())


def _read_file(path: str, max_bytes: int) -> bytes | None:
    """Read at most ``max_bytes`` of the regular file ``path``; None if the file is larger.

    Opened non-blocking and checked before reading: a FIFO, socket or device (``/dev/zero``,
    a named pipe nobody writes to) would block or never end, and is refused with OSError.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with open(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = f.read(max_bytes + 1)
    return None if len(data) > max_bytes else data
