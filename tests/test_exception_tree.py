"""The exception tree drawn in ``trio_batch._errors``'s docstring names every exception the
module defines, each under its real parent: it is the one place a reader looks."""

from __future__ import annotations

import re

from trio_batch import _errors


def _drawn() -> dict[str, str | None]:
    """Each name in the drawing, with the name it hangs under (None for the root)."""
    assert _errors.__doc__ is not None
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in _errors.__doc__.splitlines():
        found = re.match(r"^(\s*(?:[│ ]\s*)*)(?:[├└]── )?([A-Z]\w+)\s", line + " ")
        if found is None or not hasattr(_errors, found.group(2)):
            continue
        depth = len(found.group(1)) + (0 if "──" not in line else 4)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[found.group(2)] = stack[-1][1] if stack else None
        stack.append((depth, found.group(2)))
    return parents


def test_the_drawn_tree_names_every_exception_under_its_parent() -> None:
    defined = {
        name: cls
        for name, cls in vars(_errors).items()
        if isinstance(cls, type) and issubclass(cls, _errors.BatchError)
    }
    drawn = _drawn()
    assert set(drawn) == set(defined)
    for name, parent in drawn.items():
        base = defined[name].__bases__[0].__name__
        assert parent == (None if name == "BatchError" else base), name
