"""Custom ids and job metadata: what a target and a job may carry, checked before any write."""

from __future__ import annotations

import pytest

from trio_batch import InvalidRequest, InvalidTargets, Options, Target
from trio_batch._model import (
    MAX_CUSTOM_ID_LENGTH,
    MAX_METADATA_KEYS,
    MAX_METADATA_VALUE_LENGTH,
    check_metadata,
    check_targets,
    idem_key,
)


def test_a_custom_id_round_trips_through_json() -> None:
    target = Target.from_json({"url": "https://a/", "custom_id": "row-7"})
    assert target == Target("https://a/", custom_id="row-7")
    assert target.to_json() == {"url": "https://a/", "custom_id": "row-7"}
    assert Target("https://a/").to_json() == {"url": "https://a/"}


@pytest.mark.parametrize(
    "custom_id", ["", "x" * (MAX_CUSTOM_ID_LENGTH + 1), "a\x00b", "\ud800", 7, ["a"]]
)
def test_a_bad_custom_id_is_refused(custom_id: object) -> None:
    with pytest.raises(InvalidTargets, match="custom_id"):
        Target.from_json({"url": "https://a/", "custom_id": custom_id})


def test_custom_ids_are_unique_within_a_job_and_name_the_repeat() -> None:
    targets = [Target("https://a/", custom_id="x"), Target("https://b/", custom_id="x")]
    with pytest.raises(InvalidTargets, match="target 1 repeats the custom_id 'x'") as info:
        check_targets(targets)
    assert info.value.index == 1
    # The same URL twice under two custom ids is two targets.
    assert (
        len(
            check_targets(
                [Target("https://a/", custom_id="1"), Target("https://a/", custom_id="2")]
            )
        )
        == 2
    )


def test_keys_without_the_new_fields_are_what_they_were() -> None:
    # A key stored before custom ids and metadata existed still finds its job.
    targets = [Target("https://a/"), Target("https://b/", Options(grep="x"))]
    before = "438980fd08a7c6ae43cd72985158ca5f438d24ab5b7c57a22b1a7325b92652fe"  # 0.2's key
    assert idem_key("alice", targets) == before
    assert idem_key("alice", targets, {}, None) == before


def test_custom_ids_metadata_and_parent_each_change_the_key() -> None:
    plain = [Target("https://a/")]
    keys = {
        idem_key("alice", plain),
        idem_key("alice", [Target("https://a/", custom_id="c")]),
        idem_key("alice", plain, {"k": "v"}),
        idem_key("alice", plain, {"k": "w"}),
        idem_key("alice", plain, None, "A" * 22),
    }
    assert len(keys) == 5
    # Key order of the metadata does not matter.
    assert idem_key("a", plain, {"x": "1", "y": "2"}) == idem_key("a", plain, {"y": "2", "x": "1"})


def test_metadata_is_checked() -> None:
    assert check_metadata(None) == {}
    assert check_metadata({"team": "search", "a.b/c-d_e": ""}) == {
        "team": "search",
        "a.b/c-d_e": "",
    }
    bad: list[object] = [
        ["k", "v"],
        {"": "v"},
        {"k:v": "x"},
        {"has space": "x"},
        {"k" * 65: "v"},
        {"k": 1},
        {"k": None},
        {"k": "v" * (MAX_METADATA_VALUE_LENGTH + 1)},
        {"k": "a\x00"},
        {f"k{i}": "v" for i in range(MAX_METADATA_KEYS + 1)},
    ]
    for value in bad:
        with pytest.raises(InvalidRequest, match="metadata"):
            check_metadata(value)
