"""The value types: strict target parsing, config defaults and the idempotency key."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_batch import (
    BatchError,
    Busy,
    CallerBusy,
    Config,
    InvalidRequest,
    InvalidTargets,
    Job,
    JobState,
    Options,
    Result,
    Target,
    TargetState,
    TooManyTargets,
    idem_key,
)
from trio_batch._model import MAX_URL_LENGTH, check_caller, check_targets
from trio_batch._targets import _check_custom_id, _check_url, plain_urls

from .support.fakes import PLAIN, WITH_OPTIONS, Shifting


def test_statuses_compare_equal_to_their_strings() -> None:
    assert [s.value for s in JobState] == [
        "queued",
        "running",
        "done",
        "failed",
        "partial",
        "cancelled",
    ]
    assert [s.value for s in TargetState] == ["pending", "running", "done", "failed"]
    assert JobState.DONE == "done"
    assert TargetState.PENDING == "pending"
    assert JobState.RUNNING.is_live and not JobState.CANCELLED.is_live


def test_request_errors_are_batch_errors() -> None:
    # Their HTTP statuses live in the service's problem table: tests/test_http_problems.py.
    for cls in (InvalidTargets, TooManyTargets, CallerBusy, Busy, InvalidRequest):
        assert issubclass(cls, BatchError)


def test_target_from_json_accepts_url_and_options() -> None:
    target = Target.from_json({"url": "https://example.com", "options": {"grep": "x"}})
    assert target == Target("https://example.com", Options(grep="x"))
    assert Target.from_json({"url": "u"}) == Target("u")


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (None, "JSON object, not null"),
        ([], "not an array"),
        ("https://x", "not a string"),
        ({}, "needs a 'url'"),
        ({"url": 5}, "url must be a string, not a number"),
        ({"url": ""}, "must not be empty"),
        ({"url": "   "}, "must not be empty"),
        ({"url": "u", "extra": 1}, "unknown target key"),
        ({"url": "u", "options": []}, "options must be a JSON object"),
        ({"url": "u", "options": {"colour": "red"}}, "unknown option"),
        ({"url": "u", "options": {"grep": 1}}, "option 'grep' must be a string"),
        ({"url": "u", "options": {"context": "yes"}}, "must be true or false"),
        ({"url": "u", "options": {"context": 1}}, "must be true or false"),
        ({"url": "u\x00"}, "NUL"),
        ({"url": "u\udc80"}, "lone surrogate"),
        ({"url": "u" * 9000}, "the limit is 8192"),
    ],
)
def test_target_from_json_is_strict(obj: Any, message: str) -> None:
    with pytest.raises(InvalidTargets, match=message):
        Target.from_json(obj)


def test_target_to_json_omits_defaults() -> None:
    assert Target("u").to_json() == {"url": "u"}
    assert Target("u", Options(jq=".a", context=True)).to_json() == {
        "url": "u",
        "options": {"context": True, "jq": ".a"},
    }


def test_check_targets_rejects_empty_non_targets_and_repeats() -> None:
    with pytest.raises(InvalidTargets, match="at least one"):
        check_targets([])
    with pytest.raises(InvalidTargets, match="not a Target") as info:
        check_targets([Target("a"), {"url": "b"}])
    assert info.value.index == 1
    with pytest.raises(InvalidTargets, match="target 2 repeats target 0"):
        check_targets([Target("a"), Target("b"), Target("a")])
    with pytest.raises(InvalidTargets, match="list of Target"):
        check_targets("https://x")
    assert check_targets([Target("a"), Target("a", Options(grep="x"))]) == (
        Target("a"),
        Target("a", Options(grep="x")),
    )


@pytest.mark.parametrize(
    "bad", ["", None, 5, "x" * 300, "a\x00b", "\ud800", "a\x1b[2Jb", "ev\u202eil", "a\x9bb"]
)
def test_check_caller_rejects_bad_names(bad: Any) -> None:
    with pytest.raises(InvalidRequest):
        check_caller(bad)


def test_config_zero_means_default_and_negative_is_refused() -> None:
    config = Config(ttl=0, targets_per_job=0, jobs_per_caller=0, jobs_total=0)
    assert config == Config()
    assert Config(ttl=5).ttl == 5
    with pytest.raises(ValueError, match="must not be negative"):
        Config(jobs_total=-1)
    with pytest.raises(ValueError, match="finite"):
        Config(ttl=math.inf)
    with pytest.raises(TypeError, match="integer"):
        Config(targets_per_job=2.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["ttl", "target_timeout", "cancel_grace", "store_retry_for"])
def test_config_refuses_an_int_of_seconds_past_any_float(name: str) -> None:
    # It used to pass, then raise OverflowError at the first submit or fetch.
    with pytest.raises(ValueError, match=f"Config.{name} must be finite, not 1000"):
        Config(**{name: 10**400})  # type: ignore[arg-type]


def test_result_json_round_trip_and_refusals() -> None:
    result = Result("body", {"status": 200, "tags": ["a"]})
    assert Result.from_json_text(result.to_json_text()) == result
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    for meta in ({"x": {1, 2}}, {"x": math.nan}, cyclic):
        with pytest.raises(ValueError):
            Result("c", meta).to_json_text()
    with pytest.raises(ValueError, match="content must be a str"):
        Result(b"bytes").to_json_text()  # type: ignore[arg-type]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(content=st.text(), meta=st.dictionaries(st.text(), json_values, max_size=4))
def test_a_result_is_stored_as_its_whole_json_object(content: str, meta: dict[str, Any]) -> None:
    """to_json_text encodes in parts; the text is still the whole object's compact JSON,
    which the stored result_size counts."""
    try:
        expected = json.dumps(
            {"content": content, "meta": meta},
            ensure_ascii=False,
            allow_nan=False,
            separators=(",", ":"),
        )
        expected.encode("utf-8")
    except (ValueError, UnicodeEncodeError):  # lone surrogates, infinities: refused both ways
        with pytest.raises(ValueError):
            Result(content, meta).to_json_text()
        return
    assert Result(content, meta).to_json_text() == expected


def test_a_meta_refused_mid_way_leaves_no_false_cycle_behind() -> None:
    """The results' encoder is made once per thread with its cycle check: a meta refused half
    way (its dict marked as being encoded) must not make the next one look cyclic."""
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(ValueError, match="Circular reference detected"):
        Result("c", cyclic).to_json_text()
    inner: dict[str, Any] = {"ok": 1, "bad": object()}
    with pytest.raises(ValueError, match="not JSON serializable"):
        Result("c", {"inner": inner}).to_json_text()
    del inner["bad"]
    assert (
        Result("c", {"inner": inner}).to_json_text() == '{"content":"c","meta":{"inner":{"ok":1}}}'
    )


def test_two_threads_encode_the_same_meta_at_once() -> None:
    """Each thread encodes with its own cycle check: while one thread is inside a meta (held
    there by its items()), another encodes the same meta without seeing it as a cycle."""
    inside, go_on = threading.Event(), threading.Event()

    class Held(dict[str, Any]):
        def items(self) -> Any:
            if threading.current_thread() is not threading.main_thread():
                inside.set()
                go_on.wait(30)
            return super().items()

    meta = Held(n=1)
    texts: list[str] = []
    thread = threading.Thread(target=lambda: texts.append(Result("a", meta).to_json_text()))
    thread.start()
    assert inside.wait(30)
    assert Result("b", meta).to_json_text() == '{"content":"b","meta":{"n":1}}'
    go_on.set()
    thread.join(30)
    assert texts == ['{"content":"a","meta":{"n":1}}']


def test_an_empty_result_is_the_same_text_whatever_its_types() -> None:
    # The no-op fetch's Result("") is answered its constant text; subclasses go the whole way.
    class Text(str):
        __slots__ = ()

    class Meta(dict[str, Any]):
        pass

    for content, meta in (("", {}), (Text(""), {}), ("", Meta())):
        assert Result(content, meta).to_json_text() == '{"content":"","meta":{}}'
    assert Result("").to_json_text() is Result("").to_json_text()


# ---------------------------------------------------------------------------------------------
# idem_key properties

texts = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
#: URLs hold no control characters (see test_a_url_with_a_control_character_is_refused_at_submit).
url_texts = st.text(
    alphabet=st.characters(
        blacklist_categories=["Cs", "Cc"],
        blacklist_characters="\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
    )
)
urls = url_texts.filter(lambda s: s.strip() != "").map(lambda s: s[:100])
options = st.builds(
    Options,
    mode=texts,
    question=texts,
    pages=texts,
    grep=texts,
    jq=texts,
    context=st.booleans(),
    recover=st.booleans(),
)
targets = st.builds(Target, urls, options)
target_lists = st.lists(targets, min_size=1, max_size=5, unique=True)


def _reshuffled_json(target: Target, data: st.DataObject) -> Target:
    """The same target, through JSON with shuffled keys, spaces and defaults spelled out."""
    opts = {
        "mode": target.options.mode,
        "question": target.options.question,
        "pages": target.options.pages,
        "grep": target.options.grep,
        "jq": target.options.jq,
        "context": target.options.context,
        "recover": target.options.recover,
    }
    keys = data.draw(st.permutations(list(opts)))
    obj = {"options": {k: opts[k] for k in keys}, "url": target.url}
    text = json.dumps(obj, indent=data.draw(st.sampled_from([None, 1, 4])))
    return Target.from_json(json.loads(text))


@given(caller=texts, items=target_lists, data=st.data())
def test_idem_key_ignores_json_field_order_whitespace_and_defaults(
    caller: str, items: list[Target], data: st.DataObject
) -> None:
    again = [_reshuffled_json(t, data) for t in items]
    assert idem_key(caller, again) == idem_key(caller, items)


@given(caller=texts, other=texts, items=target_lists)
def test_idem_key_changes_with_the_caller(caller: str, other: str, items: list[Target]) -> None:
    if caller != other:
        assert idem_key(caller, items) != idem_key(other, items)


@given(caller=texts, items=target_lists, replacement=targets, data=st.data())
def test_idem_key_changes_with_any_url_or_option(
    caller: str, items: list[Target], replacement: Target, data: st.DataObject
) -> None:
    i = data.draw(st.integers(0, len(items) - 1))
    changed = [*items]
    changed[i] = replacement
    if changed != items:
        assert idem_key(caller, changed) != idem_key(caller, items)


@given(caller=texts, items=st.lists(targets, min_size=2, max_size=5, unique=True), data=st.data())
def test_idem_key_changes_with_target_order(
    caller: str, items: list[Target], data: st.DataObject
) -> None:
    order = data.draw(st.permutations(items))
    if list(order) != items:
        assert idem_key(caller, list(order)) != idem_key(caller, items)


@given(caller=texts, items=target_lists)
def test_idem_key_is_the_documented_hash_so_stored_keys_still_match(
    caller: str, items: list[Target]
) -> None:
    # Keys are stored: a job submitted before the key was computed faster must still be found.
    canonical = json.dumps(
        [t.to_json() for t in items], sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    expected = hashlib.sha256(f"{caller}\x00{canonical}".encode()).hexdigest()
    assert idem_key(caller, items) == expected


@given(
    asks=st.lists(
        st.tuples(
            st.sampled_from(["alice", "bob"]),
            st.sampled_from([None, {}, {"team": "a"}, {"team": "b"}]),
            st.sampled_from([None, "x" * 22]),
        ),
        min_size=1,
        max_size=6,
    ),
    items=target_lists,
)
def test_checked_targets_keep_their_last_key_only_for_the_same_request(
    asks: list[tuple[str, dict[str, str] | None, str | None]], items: list[Target]
) -> None:
    """The runner's submit and the store's create both ask for a request's key: the checked
    targets keep the last one made of them, and answer it only to the same caller, metadata
    and parent. Whatever is asked in whatever order, the key is the one hashed afresh."""
    checked = check_targets(items)
    for caller, metadata, parent_id in asks:
        expected = idem_key(caller, list(items), metadata, parent_id)  # a list: hashed afresh
        assert idem_key(caller, checked, metadata, parent_id) == expected


def test_a_caller_that_claims_to_equal_any_other_gets_its_own_key() -> None:
    class Anyone(str):
        __slots__ = ()

        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    checked = check_targets([Target("https://a.test/")])
    alice = idem_key("alice", checked)
    assert idem_key(Anyone("bob"), checked) == idem_key("bob", [Target("https://a.test/")])
    assert idem_key(Anyone("bob"), checked) != alice
    assert idem_key("alice", checked) == alice


@given(caller=texts, pool=st.lists(targets, min_size=1, max_size=3), data=st.data())
def test_checked_targets_repeat_and_hash_as_their_targets_do(
    caller: str, pool: list[Target], data: st.DataObject
) -> None:
    """check_targets finds repeats by each target's canonical JSON and keeps it for the key:
    a repeat is an equal target (options spelled out at their defaults included), and the
    checked targets' key is the plain list's."""
    picks = data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=5))
    items = [data.draw(st.sampled_from([pool[i], _reshuffled_json(pool[i], data)])) for i in picks]
    first = next((i for i, t in enumerate(items) if t in items[:i]), None)
    if first is None:
        assert idem_key(caller, check_targets(items)) == idem_key(caller, items)
    else:
        with pytest.raises(InvalidTargets, match=f"target {first} repeats target") as info:
            check_targets(items)
        assert info.value.index == first


def test_checked_targets_are_not_checked_again_and_still_compare_as_a_tuple() -> None:
    checked = check_targets([Target("a"), Target("b", Options(jq=".x"))])
    assert check_targets(checked) is checked
    assert checked == (Target("a"), Target("b", Options(jq=".x")))
    # A plain tuple with a repeat is still refused: only check_targets' own result is trusted.
    with pytest.raises(InvalidTargets, match="repeats"):
        check_targets((Target("a"), Target("a")))


@pytest.mark.parametrize(
    ("first", "later"), [(PLAIN, WITH_OPTIONS), (WITH_OPTIONS, PLAIN)], ids=["plain", "options"]
)
def test_checked_targets_and_their_notes_come_from_one_read(
    first: list[Target], later: list[Target]
) -> None:
    # Checked on one read and copied on another, the notes (plain or not, the canonical JSON
    # the key hashes) described other targets than the tuple returned.
    checked = check_targets(Shifting(first, later))
    assert list(checked) == first
    assert plain_urls(checked) == plain_urls(list(first))
    assert idem_key("c", checked) == idem_key("c", list(first))


@pytest.mark.parametrize(
    "url",
    [
        "https://x.test/?\u001b]0;PWNED\u0007\u001b[2J",
        "https://x.test/a\tb",
        "https://x.test/a\nb",
        "https://x.test/\x7f",
        "https://x.test/\x9b31m",
        "https://x.test/gnp\u202eexe",
        "https://x.test/\u2066",
    ],
)
def test_a_url_with_a_control_character_is_refused_at_submit(url: str) -> None:
    with pytest.raises(InvalidTargets, match="control character U\\+"):
        Target(url)
    with pytest.raises(InvalidTargets, match="control character"):
        Target.from_json({"url": url})


def test_a_url_with_other_unicode_is_accepted() -> None:
    assert Target("https://x.test/😀/ünï/\u2028").url.endswith("\u2028")


def test_a_jobs_json_is_every_field_in_order_with_plain_values() -> None:
    labels = {"team": "x"}
    job = Job(
        id="j",
        status=JobState.PARTIAL,
        error="e",
        targets_total=3,
        targets_done=3,
        targets_failed=1,
        caller="alice",
        caller_class="user",
        idem_key="k",
        created_at=1.0,
        updated_at=2.0,
        expires_at=3.0,
        metadata=labels,
        parent_id="p",
    )
    out = job.to_json()
    assert list(out) == [f.name for f in dataclasses.fields(Job)]  # a new field is not forgotten
    assert out == {**dataclasses.asdict(job), "status": "partial"}
    assert type(out["status"]) is str and out["metadata"] == labels
    assert out["metadata"] is not labels  # the caller may change what it is given


#: Text that reaches every branch of a target's checks: controls, NUL, surrogates, spaces.
_risky_text = st.text(
    alphabet=st.sampled_from(["a", " ", "\t", "\x00", "\x1b", "\x9b", "\u202e", "\ud800", "é"]),
    max_size=6,
) | st.just("u" * (MAX_URL_LENGTH + 1))


@given(url=_risky_text, custom_id=st.none() | _risky_text)
def test_a_target_is_refused_as_the_full_checks_refuse_it(url: str, custom_id: str | None) -> None:
    """A target's construction takes a fast path for the usual target; whatever it lets
    through or refuses, the full checks (which name the fault) let through or refuse alike."""
    expected: str | None = None
    try:
        _check_url(url)
        if custom_id is not None:
            _check_custom_id(custom_id)
    except InvalidTargets as exc:
        expected = str(exc)
    if expected is None:
        target = Target(url, custom_id=custom_id)
        assert (target.url, target.options, target.custom_id) == (url, Options(), custom_id)
    else:
        with pytest.raises(InvalidTargets) as info:
            Target(url, custom_id=custom_id)
        assert str(info.value) == expected


def test_a_target_of_a_str_subclass_is_checked_and_kept() -> None:
    class Url(str):
        pass

    assert Target(Url("https://x")).url == "https://x"
    with pytest.raises(InvalidTargets, match="NUL"):
        Target(Url("https://x\x00"))
    assert dataclasses.replace(Target("a", custom_id="c"), url="b") == Target("b", custom_id="c")


def test_plain_urls_are_those_of_targets_without_options_or_custom_ids() -> None:
    plain = [Target("https://a"), Target("https://b")]
    assert plain_urls(check_targets(plain)) == plain_urls(plain) == ["https://a", "https://b"]
    for odd in (Target("https://c", Options(grep="x")), Target("https://c", custom_id="c")):
        assert plain_urls(check_targets([*plain, odd])) is None
        assert plain_urls([*plain, odd]) is None


@pytest.mark.parametrize(
    ("name", "value"),
    [("ttl", 1e300), ("target_timeout", 1e18), ("poll_interval", 1e308), ("store_timeout", 1e7)],
)
def test_config_refuses_seconds_past_what_is_shown_or_sent_on(name: str, value: float) -> None:
    # A ttl of 1e300 passed and was stored: every later listing of the job failed to show its
    # expiry as a date (OverflowError). PostgreSQL takes a store timeout in milliseconds up
    # to 2**31 - 1: 1e7 s was refused by the server at open, as if it were unreachable.
    with pytest.raises(ValueError, match=f"Config.{name} must be at most"):
        Config(**{name: value})


def test_config_takes_a_century_and_a_store_timeout_of_24_days() -> None:
    assert Config(ttl=100 * 365 * 86400).ttl == 100 * 365 * 86400
    assert Config(store_timeout=2_147_483).store_timeout == 2_147_483


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("meta", "stored"),
    [
        ({"n": _nested(254)}, True),  # with meta's own object: 255 levels
        ({"n": _nested(255)}, False),
        ({"s": "[" * 1000, "l": [[1]] * 300}, True),  # brackets in a string are text
        ({'k\\"[[': "\\", "t": '"[' * 300, "l": [[1]] * 200}, True),  # escapes too
        ({"s": '\\"' + "[" * 300, "n": _nested(300)}, False),
    ],
    ids=["255-deep", "256-deep", "brackets-in-text", "escapes", "deep-beside-text"],
)
def test_a_meta_is_stored_by_its_nesting_not_by_the_brackets_in_its_text(
    meta: dict[str, Any], stored: bool
) -> None:
    if stored:
        assert Result.from_json_text(Result("x", meta).to_json_text()).meta == meta
    else:
        with pytest.raises(ValueError, match="nests more than 255 levels"):
            Result("x", meta).to_json_text()
