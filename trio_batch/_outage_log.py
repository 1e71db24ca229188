"""The log of a periodic call to the database through an outage: once as it begins, once as
it ends."""

from __future__ import annotations

import logging

__all__ = ["OutageLog"]


class OutageLog:
    """The log of one periodic call to the database (a poll, a purge, a delivery claim, the
    listener's connection) through an outage: the first refusal a warning with its error, the
    refusals after it at DEBUG, and the first answer after them at INFO, with how many calls
    were refused (``failures``). A poll every second would otherwise log a traceback a second
    for as long as the database is away.

    ``what`` completes "could not ...". Calls are made from one task, in turn.
    """

    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log = log
        self._what = what
        #: Refusals in a row, since the last answer.
        self.failures = 0

    def refused(self, exc: Exception) -> None:
        """Note a refusal: logged as a warning if it is the first in a row."""
        self.failures += 1
        if self.failures == 1:
            self._log.warning(
                f"could not {self._what}; trying again: {exc}",
                exc_info=exc,
                extra={"failures": 1},
            )
        else:
            self._log.debug(
                f"could not {self._what} again: {exc}", extra={"failures": self.failures}
            )

    def answered(self) -> None:
        """Note an answer: after refusals, logged at INFO with how many there were."""
        if self.failures:
            self._log.info(
                f"the store answers again: {self._what}", extra={"failures": self.failures}
            )
            self.failures = 0
