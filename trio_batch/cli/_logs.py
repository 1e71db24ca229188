"""``--log-format json``: one JSON object a line (time, level, logger, event, job id, idx,
trace id), for log pipelines.

The redaction is the plain format's: URLs are cut to their origin by the filter on the
``httpx`` logger (:mod:`trio_batch.fetchers._http`), which runs before any formatter; tokens
are never logged (serve has no access log). Of a record's extra fields only the ones named in
:data:`FIELDS` are written: others (a target's error text) may quote a full URL.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
from typing import Any

from .._text import MAX_ERROR_LENGTH, printable_json
from .._tracing import current_ids

__all__ = ["FIELDS", "JsonFormatter", "add_log_format_argument"]

#: The extra fields of trio_batch's records a JSON line carries, when a record has them.
FIELDS = ("job_id", "idx", "attempt", "status", "caller", "targets", "jobs", "delay", "failures")

#: Longest event or traceback text in one line, in characters.
MAX_TEXT = MAX_ERROR_LENGTH


def add_log_format_argument(parser: argparse.ArgumentParser) -> None:
    """``--log-format``, shared by serve and run."""
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="text (default), or json: one object a line with time, level, logger, event, "
        "job_id, idx and trace_id",
    )


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON; never raises for a record's odd values."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        line: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "event": _cut(record.getMessage()),
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = value if isinstance(value, int | float | bool) else _cut(str(value))
        ids = current_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = _cut(self.formatException(record.exc_info))
        # C1 controls and bidi overrides escaped too (json escapes C0): logs go to terminals.
        return printable_json(json.dumps(line, ensure_ascii=False, default=str))
