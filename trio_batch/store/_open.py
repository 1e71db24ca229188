"""``open_store``: a store from a path or a URL, whichever backend it names."""

from __future__ import annotations

import os
import re
import urllib.parse

from .._errors import StoreError
from ._protocol import JobStore
from .sqlite import SQLiteJobStore, Store

__all__ = ["open_store"]

#: ``scheme://`` at the start of a target: a URL, not a path.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: SQLite URL parameters, and what each becomes.
_SQLITE_PARAMS = {"synchronous": str, "busy_timeout": float}


def open_store(target: str | os.PathLike[str]) -> JobStore:
    """Open the store that ``target`` names, creating (or migrating) its schema.

    - A path, or ``:memory:``: an SQLite database file (a private in-memory one).
    - ``sqlite:PATH``, ``sqlite:///PATH`` (relative), ``sqlite:////ABS/PATH``, ``sqlite://``
      (in memory): the same, as a URL. Query parameters ``synchronous`` (``NORMAL``, ``FULL``,
      ``EXTRA``) and ``busy_timeout`` (seconds) set the :meth:`Store.open` options.
    - ``postgresql://`` and ``postgres://``: reserved for the PostgreSQL backend, which this
      version does not have yet (:class:`StoreError` says so).

    Returns a :class:`JobStore` that owns its connections: ``await store.aclose()`` it, or use
    ``async with open_store(...) as store``. Raises :class:`StoreError` (or
    :class:`SchemaVersionError`) if the database cannot be opened as a trio_batch store, and
    ValueError for a malformed URL.
    """
    text = os.fspath(target)
    scheme = text.split(":", 1)[0].lower() if ":" in text else ""
    if scheme == "sqlite":
        path, options = _sqlite_url(text)
        return SQLiteJobStore(Store.open(path, **options), owns_store=True)  # type: ignore[arg-type]
    if scheme in ("postgresql", "postgres"):
        raise StoreError(
            "PostgreSQL stores are not supported by this version of trio_batch yet: the "
            "PostgreSQL backend (trio_batch.store.postgres) is still to come; use an SQLite "
            "path for now"
        )
    if _URL.match(text):
        raise StoreError(
            f"unknown store URL scheme {scheme!r}: use a file path, :memory:, or a sqlite: URL"
        )
    return SQLiteJobStore(Store.open(text), owns_store=True)


def _sqlite_url(url: str) -> tuple[str, dict[str, object]]:
    """Split a ``sqlite:`` URL into a path and :meth:`Store.open` options."""
    rest, _, query = url[len("sqlite:") :].partition("?")
    if rest.startswith("//"):
        rest = rest[2:]  # the empty authority of sqlite:///relative and sqlite:////absolute
        if rest.startswith("/"):
            rest = rest[1:]
    path = urllib.parse.unquote(rest) or ":memory:"
    options: dict[str, object] = {}
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        convert = _SQLITE_PARAMS.get(name)
        if convert is None:
            raise ValueError(
                f"unknown sqlite URL parameter {name!r}; known: {', '.join(_SQLITE_PARAMS)}"
            )
        try:
            options[name] = convert(value)
        except ValueError:
            raise ValueError(f"sqlite URL parameter {name}={value!r} is not valid") from None
    return path, options
