"""The SQLite backend: the embedded default, one runner per database file.

- :class:`Store` (``_store``, ``_connection``, ``_schema``, ``_queries``): the synchronous
  store, its connection, schema and every SQL statement.
- :class:`SQLiteJobStore` (``_job_store``): the :class:`~trio_batch.JobStore` over it: every
  call on one store thread, outcome writes group-committed.
- ``_lock``: the file lock that keeps a second runner off a database; ``_errors``: sqlite3's
  errors translated into the typed ones.
"""

from ._job_store import SQLiteJobStore
from ._schema import SCHEMA_VERSION
from ._store import Store

__all__ = ["SCHEMA_VERSION", "SQLiteJobStore", "Store"]
