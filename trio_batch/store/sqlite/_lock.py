"""One runner per database: an advisory lock held for the runner's lifetime.

For a file database the lock is ``flock`` on ``<database>-runner.lock`` beside it. The kernel
drops it when the holding process dies, however it dies (SIGKILL included), so a crashed runner
never blocks the next start. Two opens of the same file in one process conflict too, so a
second runner in the same process is refused as well. An in-memory database has no file; a flag
on the :class:`Store` object guards it instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from ..._errors import StoreError, StoreLocked
from ._store import Store

__all__ = ["RunnerLock"]


class RunnerLock:
    """The runner's claim on one database; :meth:`acquire` it, then :meth:`release` it."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._fd: int | None = None

    @property
    def path(self) -> str | None:
        """The lock file, or None for an in-memory database."""
        return None if self._store.is_memory else f"{self._store.path}-runner.lock"

    def acquire(self) -> None:
        """Take the lock, or raise :class:`StoreLocked` at once if a runner holds it."""
        if self._store.runner_active:
            raise StoreLocked("a runner is already running on this Store")
        path = self.path
        if path is not None:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StoreError(f"cannot create the runner lock file {path!r}: {exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StoreLocked(
                    f"another runner is already running on {self._store.path!r} (it holds "
                    f"{path!r}); stop it first, or use the store read-only beside it"
                ) from None
            except OSError as exc:  # ENOLCK: a file system without locks (NFS without lockd)
                os.close(fd)
                raise StoreError(
                    f"cannot lock the runner lock file {path!r}: {exc}; put the database on "
                    f"a local file system, where one runner's lock keeps another out"
                ) from exc
            except BaseException:
                os.close(fd)
                raise
            # Who holds it, for a person looking at the file; the lock itself is the flock,
            # so a full disk here costs nothing but this note.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            self._fd = fd
        self._store.runner_active = True

    def release(self) -> None:
        """Give the lock back (closing the file releases the flock)."""
        self._store.runner_active = False
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
