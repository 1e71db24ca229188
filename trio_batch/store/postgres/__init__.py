"""The PostgreSQL backend: several runners, on several hosts, share one database.

- :class:`PostgresStore` (``_store``, ``_schema``, ``_queries``): the synchronous store over
  one psycopg connection, its schema and every SQL statement.
- :class:`PostgresJobStore` (``_job_store``): the :class:`~trio_batch.JobStore` over it: a
  store thread, group commit, and a runner's registration and heartbeats.
- ``_listen``: LISTEN for the jobs other runners change (a runner reacts at once, not at its
  next poll).
- ``_errors``: psycopg's errors translated into the typed ones.

Needs the ``postgres`` extra (psycopg 3): :func:`~trio_batch.open_store` imports this package
only for a ``postgresql://`` URL.
"""

from ._job_store import PostgresJobStore
from ._schema import SCHEMA_VERSION
from ._store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresJobStore", "PostgresStore"]
