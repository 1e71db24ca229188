"""The fetch function of ``trio-batch serve``: the built-in one, or one named by ``--fetch``."""

from __future__ import annotations

import importlib
from typing import Any, cast

from ..runner import FetchFunc
from ._http import HttpFetcher
from ._ssrf import DestinationPolicy

__all__ = ["builtin_fetch", "load_fetch"]


def load_fetch(spec: str) -> FetchFunc:
    """Import ``module:attribute`` (``--fetch``) as a fetch function; raises ValueError."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--fetch takes module:function, not {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ValueError(f"{spec} is a {type(obj).__name__}, not a function")
    return cast(FetchFunc, obj)


def builtin_fetch(
    *,
    allow_private: bool = False,
    allow_file: bool = False,
    process_timeout: float = 10.0,
    **settings: Any,
) -> FetchFunc:
    """The service's default fetch function: the built-in HTTP fetcher behind the SSRF policy.

    Every URL, the first and each redirect hop, goes through :class:`DestinationPolicy`;
    proxies from the environment are refused. ``file://`` URLs are refused unless
    ``allow_file``: they read the server's own disk (its token file included) for every
    caller, so they are a separate choice from ``allow_private``. ``process_timeout`` bounds
    the processing of one body (see :class:`HttpFetcher`). ``settings`` go to
    :class:`HttpFetcher` as they are (``per_host_concurrency``, ``per_host_rate``, ``http2``).
    Its connections go only to addresses the policy checked (DNS pinning). Needs the ``cli``
    extra (the ``http`` extra brings it).
    """
    fetcher = HttpFetcher(
        check_url=DestinationPolicy(allow_private=allow_private, allow_file=allow_file),
        allow_file=allow_file,
        process_timeout=process_timeout,
        trust_env=False,
        **settings,
    )
    return cast(FetchFunc, fetcher)
