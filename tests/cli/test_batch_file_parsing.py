"""A JSON-array batch file is read in linear time: the lines its elements start on are counted
on from one element to the next, never from the file's start for each."""

from __future__ import annotations

import json

from trio_batch.cli._input import parse_targets


class CountingText(str):
    """A str that adds up how many characters its ``count`` calls scan."""

    scanned = 0

    def count(self, sub: str, start: int | None = 0, end: int | None = None) -> int:  # type: ignore[override]
        first = start or 0
        last = len(self) if end is None else end
        CountingText.scanned += max(last - first, 0)
        return super().count(sub, first, last)


def test_a_json_array_is_scanned_once_for_its_line_numbers() -> None:
    rows = [
        json.dumps({"url": f"https://example.test/{i}", "custom_id": f"c{i}"}) for i in range(3000)
    ]
    text = CountingText("[\n" + ",\n".join(rows) + "\n]\n")
    CountingText.scanned = 0
    targets, lines = parse_targets(text)
    assert len(targets) == 3000 and lines[:3] == [2, 3, 4] and lines[-1] == 3001
    assert CountingText.scanned <= len(text)


def test_an_error_in_a_json_array_still_names_its_line() -> None:
    text = '[\n{"url": "https://example.test/a"},\n{"url": "https://example.test/a"}\n]'
    try:
        parse_targets(text)
    except ValueError as exc:
        assert getattr(exc, "line", None) == 3
    else:
        raise AssertionError("a repeated target was accepted")
