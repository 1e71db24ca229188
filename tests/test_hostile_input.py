"""Hostile input: whatever a caller passes, only BatchError (or a None/False answer) comes out.

Hypothesis feeds ``Target.from_json``, ``Options.from_json``, ``Target(...)`` and a runner's
``submit``, ``status``, ``cancel`` and ``wait`` with arbitrary JSON values, strings with NUL
bytes and lone surrogates, 1 MB strings, huge ints and None. Any exception other than a
:class:`BatchError` fails the test. Every input is also judged by the documented rules, written
out again here (:func:`valid_url` and its neighbours): bad input must be refused, good input
accepted (a submit may still meet a full cap), and an unknown job id answers None or False.
After every example the database is checked: ``PRAGMA integrity_check`` and
``foreign_key_check`` are clean, every job has exactly its targets, nothing is left live, and
exactly one job exists per accepted, non-reused submit.

Each example runs its own ``trio.run`` on a fresh file database (a sync ``@given`` test), so the
fast path and the store thread are both in play. ``TRIO_BATCH_SOAK=1`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import tempfile
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_batch import (
    BatchError,
    Busy,
    CallerBusy,
    Config,
    InvalidRequest,
    Job,
    JobLive,
    Options,
    Result,
    Runner,
    Store,
    Target,
    TargetStatus,
    TooManyTargets,
    open_runner,
)

from .support.figures import Figures, scaled

MB = 1_000_000
OPTION_NAMES = ("mode", "question", "pages", "grep", "jq", "context", "recover")
SPECIAL_TEXT = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "https://hostile.test/\x00",
    "https://hostile.test/\udc80",
    "https://hostile.test/😀\u2028\u202e",
    "A" * 22,  # shaped like a job id, but unknown
    "url",
    "options",
)
#: (prefix, total length): long strings, built on demand so that no strategy's repr holds them.
LONG_TEXT = (
    ("x", MB),
    ("https://hostile.test/", MB),
    ("a", 256),  # the caller-name limit
    ("a", 257),
    ("https://hostile.test/", 8192),  # the URL limit
    ("https://hostile.test/", 8193),
)


def _long_text(spec: tuple[str, int]) -> str:
    prefix, length = spec
    return prefix + "b" * (length - len(prefix))


SETTINGS = settings(
    max_examples=scaled(150, 3000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: What the runner examples saw, for the printed figures.
SEEN: dict[str, int] = {}
#: Examples run per test.
EXAMPLES: dict[str, int] = {}
#: What came out of the calls under test, over every example: an accepted value, a None or
#: False answer, a BatchError, or anything else (which also fails its test).
CAME_OUT: dict[str, int] = {"a value": 0, "None/False": 0, "BatchError": 0, "anything else": 0}


def seen(what: str) -> None:
    SEEN[what] = SEEN.get(what, 0) + 1


def came_out(what: str) -> None:
    CAME_OUT[what] += 1


@contextlib.contextmanager
def counting_what_comes_out() -> Iterator[None]:
    """Count a BatchError, or any other exception, that leaves the block; re-raise it."""
    try:
        yield
    except BatchError:
        came_out("BatchError")
        raise
    except Exception:
        came_out("anything else")
        raise


# --------------------------------------------------------------------------------------------
# The documented rules, written out again as the oracle

OPTION_KINDS = {"mode": str, "question": str, "pages": str, "grep": str, "jq": str}
OPTION_KINDS |= {"context": bool, "recover": bool}


def storable_text(value: object, limit: int) -> bool:
    """A string of at most ``limit`` characters, without NUL or lone surrogates."""
    return (
        isinstance(value, str)
        and len(value) <= limit
        and "\x00" not in value
        and not any(0xD800 <= ord(ch) <= 0xDFFF for ch in value)
    )


#: The bidirectional formatting characters (Unicode's Bidi_Control property).
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def printable_text(value: str) -> bool:
    """No control character (general category Cc: C0, DEL, C1) and no bidi control."""
    return not any(unicodedata.category(ch) == "Cc" or ch in BIDI_CONTROLS for ch in value)


def valid_url(url: object) -> bool:
    return (
        isinstance(url, str)
        and storable_text(url, 8192)
        and url.strip() != ""
        and printable_text(url)
    )


def valid_options_json(obj: object) -> bool:
    if not isinstance(obj, dict) or not set(obj) <= set(OPTION_KINDS):
        return False
    return all(
        type(value) is bool if OPTION_KINDS[name] is bool else storable_text(value, 8192)
        for name, value in obj.items()
    )


def valid_target_json(obj: object) -> bool:
    return (
        isinstance(obj, dict)
        and "url" in obj
        and set(obj) <= {"url", "options"}
        and valid_url(obj["url"])
        and valid_options_json(obj.get("options", {}))
    )


def valid_name(name: object) -> bool:
    """A caller or caller-class name."""
    return storable_text(name, 256) and name != "" and printable_text(name)


def valid_submit(caller: object, caller_class: object, targets: object) -> bool:
    """Whether a submit passes every check but the live-job caps (Config's defaults)."""
    return (
        valid_name(caller)
        and valid_name(caller_class)
        and isinstance(targets, list | tuple)
        and 0 < len(targets) <= Config().targets_per_job
        and all(isinstance(t, Target) for t in targets)
        and len(set(targets)) == len(targets)
    )


# --------------------------------------------------------------------------------------------
# Strategies

hostile_text = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=20),  # surrogates included
    st.sampled_from(SPECIAL_TEXT),
    st.sampled_from(LONG_TEXT).map(_long_text),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**64, -(2**63), 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    hostile_text,
)
keys = st.one_of(st.sampled_from(("url", "options", *OPTION_NAMES)), hostile_text)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=12,
)
urls = st.one_of(
    st.sampled_from([f"https://hostile.test/{name}" for name in "abcdef"]),
    st.text(st.characters(exclude_categories=()), max_size=12).map(
        lambda s: f"https://hostile.test/{s}"
    ),
    hostile_text,
    json_values,
)
options_json = st.one_of(
    st.dictionaries(st.sampled_from(OPTION_NAMES), st.one_of(st.booleans(), hostile_text)),
    json_values,
)
target_json = st.one_of(
    st.fixed_dictionaries({"url": urls}, optional={"options": options_json}),
    json_values,
)


def maybe_target(obj: object) -> object:
    """The Target ``obj`` describes, or ``obj`` itself if it describes none."""
    try:
        return Target.from_json(obj)
    except BatchError:
        return obj


valid_targets = st.builds(
    Target,
    url=st.text(
        st.characters(codec="utf-8", exclude_categories=["Cc"], exclude_characters=BIDI_CONTROLS),
        max_size=12,
    ).map(lambda s: f"https://hostile.test/{s}")
    | st.sampled_from([f"https://hostile.test/{name}" for name in "abcdef"]),
    options=st.builds(
        Options,
        mode=st.sampled_from(["", "text"]),
        grep=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8),
        context=st.booleans(),
    ),
)
good_target_lists = st.lists(valid_targets, min_size=1, max_size=5, unique=True)
target_lists = st.one_of(
    good_target_lists,
    st.lists(target_json.map(maybe_target), max_size=6),  # valid, junk or mixed
    st.lists(st.sampled_from([f"https://hostile.test/{n}" for n in "abc"]), max_size=4).map(
        lambda names: [Target(n) for n in names]  # repeats included
    ),
    st.integers(33, 40).map(lambda n: [Target(f"https://hostile.test/{i}") for i in range(n)]),
    json_values,
)
good_callers = st.sampled_from(["alice", "bob", "carol", "dave"])
callers = st.one_of(good_callers, hostile_text, json_values)
good_classes = st.sampled_from(["user", "anonymous"])
caller_classes = st.one_of(good_classes, hostile_text, json_values)
job_ids = st.one_of(st.integers(0, 7).map(lambda i: ("known", i)), hostile_text, json_values)
#: Target indexes: in range, past the end, negative, past any store's column, and not ints.
target_indexes = st.one_of(st.integers(-3, 40), st.integers(2**31 - 2, 2**70), json_values)


@dataclass(frozen=True)
class Op:
    kind: str
    args: tuple[Any, ...]


ops = st.one_of(
    st.builds(
        lambda c, k, t: Op("submit", (c, k, t)), good_callers, good_classes, good_target_lists
    ),
    st.builds(lambda c, k, t: Op("submit", (c, k, t)), callers, caller_classes, target_lists),
    st.builds(lambda i: Op("status", (i,)), job_ids),
    st.builds(lambda i: Op("cancel", (i,)), job_ids),
    st.builds(lambda i: Op("wait", (i,)), job_ids),
    st.builds(lambda i: Op("overview", (i,)), job_ids),
    st.builds(lambda i, n: Op("target", (i, n)), job_ids, target_indexes),
    st.builds(lambda i: Op("forget", (i,)), job_ids),
)


# --------------------------------------------------------------------------------------------
# Value types


@SETTINGS
@given(obj=target_json)
def test_target_from_json_refuses_exactly_what_the_rules_refuse(obj: object) -> None:
    EXAMPLES["Target.from_json"] = EXAMPLES.get("Target.from_json", 0) + 1
    try:
        with counting_what_comes_out():
            target = Target.from_json(obj)
    except BatchError:
        assert not valid_target_json(obj), f"a valid target was refused: {obj!r:.300}"
        return
    came_out("a value")
    assert valid_target_json(obj), f"an invalid target was accepted: {obj!r:.300}"
    # What was accepted is storable and round-trips.
    text = json.dumps(target.to_json(), ensure_ascii=False)
    text.encode("utf-8")
    assert Target.from_json(json.loads(text)) == target


@SETTINGS
@given(url=urls, options=options_json)
def test_target_and_options_constructors_refuse_exactly_what_the_rules_refuse(
    url: object, options: object
) -> None:
    EXAMPLES["Target/Options"] = EXAMPLES.get("Target/Options", 0) + 1
    try:
        with counting_what_comes_out():
            parsed = Options.from_json(options)
    except BatchError:
        assert not valid_options_json(options), f"valid options refused: {options!r:.300}"
        parsed = Options()
    else:
        came_out("a value")
        assert valid_options_json(options), f"invalid options accepted: {options!r:.300}"
    for opts in (parsed, options):
        valid = valid_url(url) and isinstance(opts, Options)
        try:
            with counting_what_comes_out():
                Target(url, opts)  # type: ignore[arg-type]
        except BatchError:
            assert not valid, f"a valid target was refused: {url!r:.300}, {opts!r:.300}"
        else:
            came_out("a value")
            assert valid, f"an invalid target was accepted: {url!r:.300}, {opts!r:.300}"


# --------------------------------------------------------------------------------------------
# The runner


async def echo(target: Target) -> Result:
    await trio.lowlevel.checkpoint()
    return Result(target.url, {"options": target.options.to_json()})


def check_answer(answer: tuple[Job, list[TargetStatus]] | None) -> None:
    if answer is not None:
        job, targets = answer
        json.dumps([job.to_json(), *(t.to_json() for t in targets)])


@dataclass
class Example:
    created: int = 0
    known: list[str] = field(default_factory=list)

    def resolve(self, value: object) -> object:
        if isinstance(value, tuple) and value[:1] == ("known",) and self.known:
            return self.known[value[1] % len(self.known)]
        return value


async def run_op(runner: Runner, example: Example, op: Op) -> None:
    """Make one call; check its answer against the rules; count what came out."""
    if op.kind == "submit":
        job_id, reused = await runner.submit(*op.args)
        assert valid_submit(*op.args), f"an invalid submit was accepted: {op.args!r:.300}"
        example.created += not reused
        example.known.append(job_id)
        seen("submit accepted")
        came_out("a value")
        return
    job_id = example.resolve(op.args[0])
    known = isinstance(job_id, str) and job_id in example.known
    answer: object
    if op.kind == "status":
        status = await runner.status(job_id)  # type: ignore[arg-type]
        check_answer(status)
        answer = status
    elif op.kind == "cancel":
        answer = await runner.cancel(job_id)  # type: ignore[arg-type]
        assert answer is True or answer is False
    elif op.kind == "overview":
        found = await runner.overview(job_id)  # type: ignore[arg-type]
        check_answer(None if found is None else found[:2])
        answer = found
    elif op.kind == "target":
        idx = op.args[1]
        one = await runner.target(job_id, idx)  # type: ignore[arg-type]
        check_answer(None if one is None else (one[0], [one[1]]))
        # Only a known job's existing target is found; every job has a target 0.
        assert one is None or (known and type(idx) is int and one[1].idx == idx)
        if known and type(idx) is int and idx == 0:
            assert one is not None, "target 0 of a known job was not found"
        seen(op.kind)
        came_out("None/False" if one is None else "a value")
        return
    elif op.kind == "forget":
        try:
            forgotten = await runner.forget(job_id)  # type: ignore[arg-type]
        except JobLive:
            assert known, "an unknown id was called live"
            seen("forget refused (JobLive)")
            came_out("BatchError")
            return
        if forgotten is not None:  # gone: no longer known, and its rows deleted
            example.known = [k for k in example.known if k != forgotten.id]
            example.created -= 1
        answer = forgotten
        if known:
            seen(op.kind)
            came_out("None/False" if answer is None else "a value")
            return
    else:
        job = await runner.wait(job_id)  # type: ignore[arg-type]
        assert job is None or job.is_terminal
        answer = job
    if known:
        assert op.kind == "cancel" or answer is not None, f"{op.kind} lost a known job"
    else:
        assert answer is None or answer is False, f"{op.kind} of an unknown id gave {answer!r}"
    seen(op.kind)
    came_out("None/False" if answer is None or answer is False else "a value")


async def run_ops(store: Store, operations: Sequence[Op]) -> Example:
    example = Example()
    async with open_runner(store, echo, Config()) as runner:
        for op in operations:
            try:
                with counting_what_comes_out():
                    await run_op(runner, example, op)
            except (InvalidRequest, TooManyTargets) as exc:
                # Refused as malformed: right only for input the rules call malformed.
                assert op.kind == "submit" and not valid_submit(*op.args), repr(exc)
                seen(f"{op.kind} refused ({type(exc).__name__})")
            except (CallerBusy, Busy) as exc:
                assert op.kind == "submit" and valid_submit(*op.args), repr(exc)
                seen(f"{op.kind} refused ({type(exc).__name__})")
    return example


def check_database(path: Path, example: Example) -> None:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        jobs = conn.execute("SELECT id, status, targets_total FROM jobs").fetchall()
        assert len(jobs) == example.created, "a refused submit left a job behind (or lost one)"
        for job_id, status, total in jobs:
            assert status not in ("queued", "running")
            idxs = [
                r[0] for r in conn.execute("SELECT idx FROM targets WHERE job_id = ?", (job_id,))
            ]
            assert sorted(idxs) == list(range(total)), f"job {job_id} is half-created"
    finally:
        conn.close()


@SETTINGS
@given(operations=st.lists(ops, min_size=1, max_size=8))
def test_runner_calls_refuse_bad_input_with_batch_errors(operations: list[Op]) -> None:
    EXAMPLES["runner"] = EXAMPLES.get("runner", 0) + 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hostile.db"
        with Store.open(path) as store:
            example = trio.run(run_ops, store, operations)
        check_database(path, example)


@pytest.mark.parametrize("caller_class", [[], {}, ["user"], {"class": "user"}])
def test_an_unhashable_caller_class_is_an_invalid_request(caller_class: object) -> None:
    """Regression: Runner.submit looked an unhashable caller_class up in Config.class_limits
    before validating it, and raised TypeError (found by the runner test above)."""

    async def submit() -> None:
        with Store.open() as store:
            async with open_runner(store, echo) as runner:
                target = Target("https://hostile.test/a")
                with pytest.raises(InvalidRequest):
                    await runner.submit("alice", caller_class, [target])  # type: ignore[arg-type]

    trio.run(submit)


def test_hostile_input_figures(figures: Figures) -> None:
    """Print what the runner examples above exercised (they run first: file order)."""
    examples = ", ".join(f"{name} {n}" for name, n in EXAMPLES.items())
    detail = ", ".join(f"{name} {n}" for name, n in sorted(SEEN.items()))
    outcomes = ", ".join(f"{what} {n}" for what, n in CAME_OUT.items())
    figures.add(f"hostile input: examples {examples}; what came out of the calls: {outcomes}")
    figures.add(f"hostile input: runner calls: {detail}")
