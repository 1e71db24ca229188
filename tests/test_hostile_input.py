"""Hostile input: whatever a caller passes, only BatchError (or a None/False answer) comes out.

Hypothesis feeds ``Target.from_json``, ``Options.from_json``, ``Target(...)`` and a runner's
``submit``, ``status``, ``cancel`` and ``wait`` with arbitrary JSON values, strings with NUL
bytes and lone surrogates, 1 MB strings, huge ints and None. Any exception other than a
:class:`BatchError` fails the test (it is simply not caught). After every example the database
is checked: ``PRAGMA integrity_check`` and ``foreign_key_check`` are clean, every job has exactly
its targets, nothing is left live, and exactly one job exists per accepted, non-reused submit.

Each example runs its own ``trio.run`` on a fresh file database (a sync ``@given`` test), so the
fast path and the store thread are both in play. ``TRIO_BATCH_SOAK=1`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_batch import (
    BatchError,
    Config,
    InvalidRequest,
    Job,
    Options,
    Result,
    Store,
    Target,
    TargetStatus,
    open_runner,
)

from .figures import Figures, scaled

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


def seen(what: str) -> None:
    SEEN[what] = SEEN.get(what, 0) + 1


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
    url=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12).map(
        lambda s: f"https://hostile.test/{s}"
    )
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
)


# --------------------------------------------------------------------------------------------
# Value types


@SETTINGS
@given(obj=target_json)
def test_target_from_json_raises_only_batch_errors(obj: object) -> None:
    EXAMPLES["Target.from_json"] = EXAMPLES.get("Target.from_json", 0) + 1
    try:
        target = Target.from_json(obj)
    except BatchError:
        return
    # What was accepted is storable and round-trips.
    text = json.dumps(target.to_json(), ensure_ascii=False)
    text.encode("utf-8")
    assert Target.from_json(json.loads(text)) == target


@SETTINGS
@given(url=urls, options=options_json)
def test_target_and_options_constructors_raise_only_batch_errors(
    url: object, options: object
) -> None:
    EXAMPLES["Target/Options"] = EXAMPLES.get("Target/Options", 0) + 1
    try:
        parsed = Options.from_json(options)
    except BatchError:
        parsed = Options()
    for opts in (parsed, options):
        with contextlib.suppress(BatchError):
            Target(url, opts)  # type: ignore[arg-type]


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


async def run_ops(store: Store, operations: Sequence[Op]) -> Example:
    example = Example()
    async with open_runner(store, echo, Config()) as runner:
        for op in operations:
            try:
                if op.kind == "submit":
                    job_id, reused = await runner.submit(*op.args)
                    example.created += not reused
                    example.known.append(job_id)
                    seen("submit accepted")
                elif op.kind == "status":
                    check_answer(await runner.status(example.resolve(op.args[0])))  # type: ignore[arg-type]
                    seen("status")
                elif op.kind == "cancel":
                    cancelled = await runner.cancel(example.resolve(op.args[0]))  # type: ignore[arg-type]
                    assert cancelled is True or cancelled is False
                    seen("cancel")
                else:
                    job = await runner.wait(example.resolve(op.args[0]))  # type: ignore[arg-type]
                    assert job is None or job.is_terminal
                    seen("wait")
            except BatchError as exc:
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
def test_runner_calls_raise_only_batch_errors(operations: list[Op]) -> None:
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
    figures.add(f"hostile input: examples {examples}; only BatchError or None/False came out")
    figures.add(f"hostile input: runner calls: {detail}")
