"""``open_store``: a store from a path or a URL, whichever backend it names."""

from __future__ import annotations

import os
import re
import urllib.parse

from .._errors import StoreError
from .._text import parse_decimal, safe_text
from ._protocol import JobStore
from .sqlite import SQLiteJobStore, Store

__all__ = ["open_store"]

#: ``scheme://`` at the start of a target: a URL, not a path.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def open_store(
    target: str | os.PathLike[str],
    *,
    store_timeout: float | None = None,
    listen_url: str | None = None,
) -> JobStore:
    """Open the store that ``target`` names, creating (or migrating) its schema.

    - A path, or ``:memory:``: an SQLite database file (a private in-memory one).
    - ``sqlite:PATH``, ``sqlite:///PATH`` (relative), ``sqlite:////ABS/PATH``, ``sqlite://``
      (in memory): the same, as a URL. Query parameters ``synchronous`` (``NORMAL``, ``FULL``,
      ``EXTRA``) and ``busy_timeout`` (seconds) set the :meth:`Store.open` options.
    - ``postgresql://`` and ``postgres://`` URLs (libpq's: ``postgresql://user@host/db``,
      ``?host=/socket/dir`` and the other libpq parameters): a PostgreSQL database that several
      runners may share (:class:`~trio_batch.store.postgres.PostgresJobStore`). Needs the
      ``postgres`` extra (``pip install 'trio-batch[postgres]'``); without it
      :class:`StoreError` says so. The URL may be a pooler's in transaction mode (PgBouncer);
      ``listen_url`` is then a direct URL of the same database, for LISTEN (see
      docs/how-to/postgres.md). ``store_timeout`` (seconds, default 5; ``Config.store_timeout``)
      bounds every call: past it, :class:`StoreUnavailable`.

    Returns a :class:`JobStore` that owns its connections: ``await store.aclose()`` it, or use
    ``async with open_store(...) as store``. Raises :class:`StoreError` (or
    :class:`SchemaVersionError`) if the database cannot be opened as a trio_batch store, and
    ValueError for a malformed URL, or for ``listen_url`` with SQLite. SQLite ignores
    ``store_timeout``: its calls are bounded by ``busy_timeout``.
    """
    text = os.fspath(target)
    scheme = text.split(":", 1)[0].lower() if ":" in text else ""
    if scheme in ("postgresql", "postgres"):
        return _open_postgres(text, store_timeout, listen_url)
    if listen_url is not None:
        raise ValueError("listen_url is for PostgreSQL stores only (a direct URL for LISTEN)")
    if scheme == "sqlite":
        path, synchronous, busy_timeout = _sqlite_url(text)
        store = Store.open(path, synchronous=synchronous, busy_timeout=busy_timeout)
        return SQLiteJobStore(store, owns_store=True)
    if _URL.match(text):
        raise StoreError(
            f"unknown store URL scheme {scheme!r}: use a file path, :memory:, or a sqlite: URL"
        )
    return SQLiteJobStore(Store.open(text), owns_store=True)


def _open_postgres(url: str, store_timeout: float | None, listen_url: str | None) -> JobStore:
    """A PostgreSQL store; psycopg is imported only now, so the core does not need it."""
    try:
        from .postgres import PostgresJobStore
    except ImportError as exc:
        raise StoreError(
            "PostgreSQL stores need psycopg 3, which is not installed: install trio_batch's "
            f"postgres extra (pip install 'trio-batch[postgres]') ({exc})"
        ) from exc
    if store_timeout is None:
        return PostgresJobStore.open(url, listen_url=listen_url)
    return PostgresJobStore.open(url, store_timeout=store_timeout, listen_url=listen_url)


def _sqlite_url(url: str) -> tuple[str, str, float]:
    """Split a ``sqlite:`` URL into a path, ``synchronous`` and ``busy_timeout``."""
    rest, _, query = url[len("sqlite:") :].partition("?")
    if rest.startswith("//"):
        rest = rest[2:]  # the empty authority of sqlite:///relative and sqlite:////absolute
        if rest.startswith("/"):
            rest = rest[1:]
    path = urllib.parse.unquote(rest) or ":memory:"
    params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    unknown = set(params) - {"synchronous", "busy_timeout"}
    if unknown:
        raise ValueError(
            f"unknown sqlite URL parameter(s) {', '.join(sorted(unknown))}; "
            "known: synchronous, busy_timeout"
        )
    busy_timeout = parse_decimal(params.get("busy_timeout", "5"))
    if busy_timeout is None:
        raise ValueError(
            f"sqlite URL parameter busy_timeout={safe_text(params['busy_timeout'], 40)!r} is "
            "not a number of seconds"
        )
    return path, params.get("synchronous", "NORMAL"), busy_timeout
