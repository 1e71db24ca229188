"""Where jobs live: the backend-neutral store interface and its backends.

- :class:`JobStore` (``_protocol``): every operation the runner and the front ends use;
  :class:`ClusterStore`: what a store that several runners share adds.
- :func:`open_store` (``_open``): a store from a path or URL.
- ``_thread``, ``_face``, ``_rows`` and ``_pages``: the store thread (every call of a
  backend runs there, and its outcome writes are group-committed there), the shared part of
  the backends' async faces, and the row mapping and the SQL of a page of targets (bounded by
  count and by size) that every backend shares.
- :mod:`.sqlite`: the SQLite backend, the embedded default (one runner per database file).
- :mod:`.postgres`: the PostgreSQL backend, for several runners on several hosts (the
  ``postgres`` extra; imported only when a ``postgresql://`` URL is opened, so the core never
  needs psycopg).

To add a backend: a folder here with a class that implements :class:`JobStore` (keep its SQL
in one module of named statements), a URL scheme in :func:`open_store`, and a parameter in
``tests/test_store_conformance.py`` so that every check runs on it too.
"""

from ._filters import LATEST_TIME, JobFilter, parse_filter
from ._open import open_store
from ._protocol import (
    Admission,
    ChangeObserver,
    ClusterStore,
    DrainChanges,
    HostLimits,
    JobStore,
    NewJob,
    ReapedJob,
    ReapObserver,
    StoreCounts,
    WriteObserver,
    cluster_of,
)
from .sqlite import SCHEMA_VERSION, SQLiteJobStore, Store

__all__ = [
    "LATEST_TIME",
    "SCHEMA_VERSION",
    "Admission",
    "ChangeObserver",
    "ClusterStore",
    "DrainChanges",
    "HostLimits",
    "JobFilter",
    "JobStore",
    "NewJob",
    "ReapObserver",
    "ReapedJob",
    "SQLiteJobStore",
    "Store",
    "StoreCounts",
    "WriteObserver",
    "cluster_of",
    "open_store",
    "parse_filter",
]
