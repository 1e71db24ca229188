"""``trio-batch gc`` and Ctrl-C: the purge stops after the batch in progress.

Its loop made store calls only, and a store call never takes a KeyboardInterrupt (it runs to
completion): a Ctrl-C was held back until every lapsed job was purged. The SIGINT here is a
real one, sent by the store thread while a batch runs."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from trio_batch import Store
from trio_batch.cli import main
from trio_batch.cli._inspect import GC_BATCH


def test_ctrl_c_stops_gc_after_the_batch_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "jobs.db"
    Store.open(db).close()
    batches = 0

    def purge_expired(self: Store, now: float | None = None, **kwargs: Any) -> int:
        nonlocal batches
        batches += 1
        if batches == 2:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while this batch runs
        return GC_BATCH if batches < 1000 else 0  # as if there were many more to purge

    monkeypatch.setattr(Store, "purge_expired", purge_expired)
    assert main(["gc", "--db", str(db)]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert batches <= 3  # the batch the Ctrl-C came in, and at most one queued behind it
