"""Targets checked at submit by the fetch function's own ``check_target`` hook.

The runner knows nothing of what a target's options mean; the fetch function does. A fetch
function (any callable object) may carry a ``check_target`` attribute: a plain, quick function
called with each target of a job at submit, before anything is stored. It returns to accept
the target and raises to refuse it; the exception's message becomes the 422's detail, its
``hint`` attribute (a string) the hint and its ``option`` attribute (a string) the option named.
:class:`~trio_batch.fetchers.HttpFetcher` has one; an embedding program's own fetch function
gets one with ``my_fetch.check_target = my_check`` or a method of that name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .._errors import InvalidTargets
from .._model import Target
from .._text import safe_text

__all__ = ["CheckTarget", "TargetChecked", "check_each", "target_checker"]

#: The hook: called with one target; returns to accept it, raises to refuse it.
CheckTarget = Callable[[Target], None]


class TargetChecked(Protocol):
    """A fetch function that checks targets at submit: it has a ``check_target`` attribute."""

    def check_target(self, target: Target) -> None:
        """Return if ``target`` can be fetched as its options say; raise (with a hint) if not."""


def target_checker(fetch: object) -> CheckTarget | None:
    """``fetch``'s ``check_target`` hook, or None if it has none (or a non-callable one)."""
    try:
        check = getattr(fetch, "check_target", None)
    except Exception:  # a hostile property must not stop the runner from opening
        return None
    return check if callable(check) else None


def check_each(check: CheckTarget, targets: tuple[Target, ...]) -> None:
    """Run ``check`` on every target; raises :class:`InvalidTargets` for the first refused.

    Any ``Exception`` from the hook refuses the target (a misbehaving hook fails the submit
    with a 422, never the runner); ``Cancelled`` and other ``BaseException`` pass through.
    """
    for index, target in enumerate(targets):
        try:
            check(target)
        except Exception as exc:
            raise _refusal(exc, index, target) from None


def _refusal(exc: Exception, index: int, target: Target) -> InvalidTargets:
    message = safe_text(exc) or type(exc).__name__
    return InvalidTargets(
        f"target {index} ({safe_text(target.url, 200)}): {message}",
        index=index,
        option=_text_attribute(exc, "option"),
        hint=_text_attribute(exc, "hint"),
    )


def _text_attribute(exc: Exception, name: str) -> str | None:
    try:
        value = getattr(exc, name, None)
    except Exception:  # a hostile property, like a hostile __str__, must not escape
        return None
    return safe_text(value) if isinstance(value, str) and value else None
