"""A pytest plugin (``-p tests.support.show_markers``) that prints each collected test's id
and the markers it carries, one line each: what tests/test_markers.py reads."""

from __future__ import annotations

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    """Print ``MARKS <marker names, comma-separated> TAB <node id>`` for every test left after
    deselection (an id may hold spaces)."""
    for item in session.items:
        names = sorted({mark.name for mark in item.iter_markers()})
        print(f"MARKS {','.join(names)}\t{item.nodeid}")
