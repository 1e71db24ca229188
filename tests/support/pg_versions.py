"""PostgreSQL databases as earlier schema versions left them, made from a current one: what
the migration tests upgrade."""

from __future__ import annotations

from pathlib import Path

import psycopg

from trio_batch.store.postgres import _live_queries as lq
from trio_batch.store.postgres import _queries as q

__all__ = ["V15_OUTCOME_FUNCTION", "back_to_v14", "back_to_v15"]

#: Schema 15's one-outcome function as 15 made it: what a runner of 15 calls for each outcome
#: through a pooler.
V15_OUTCOME_FUNCTION = Path(__file__).parent / "data" / "record_outcome_v15.sql"


def back_to_v15(dsn: str) -> None:
    """The database as version 15 left it: 15's one-outcome function in place (16 changed no
    table)."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(V15_OUTCOME_FUNCTION.read_text())
        conn.execute("UPDATE trio_batch_schema SET version = 15")


def back_to_v14(dsn: str) -> None:
    """The database as version 14 left it: each live job's progress (``q.PROGRESS``) in its
    ``jobs`` row, no ``live_progress``, and v14's triggers. The outcome's and the submit's
    functions stay as they are: every migration past 14 makes them again."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("DROP TRIGGER trio_batch_live_jobs_ending ON jobs")
        conn.execute("DROP TRIGGER trio_batch_live_jobs_counted ON jobs")
        conn.execute(
            "UPDATE jobs SET "
            + ", ".join(f"{c} = l.{c}" for c in q.PROGRESS)
            + " FROM live_progress AS l WHERE l.job_id = jobs.id"
        )
        conn.execute("DROP TABLE live_progress")
        conn.execute(lq.LIVE_JOBS_FUNCTION)
        conn.execute("UPDATE trio_batch_schema SET version = 14")
