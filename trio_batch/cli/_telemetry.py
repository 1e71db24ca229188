"""``serve`` and ``run`` set up the OpenTelemetry SDK, from the standard ``OTEL_*`` variables.

Tracing is on with ``--otel``, or when the environment asks for it (``OTEL_TRACES_EXPORTER``,
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set) and the SDK is
installed (the ``trio-batch[otel-sdk]`` extra). ``OTEL_SDK_DISABLED=true`` turns it off. The
SDK and its exporters read the rest of the variables themselves (endpoint, headers, timeouts,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from typing import Any

from .._tracing import NO_TRACING, Tracing

__all__ = ["ASKING_VARIABLES", "add_otel_argument", "setup_tracing"]

#: Any of these set asks for tracing when the SDK is installed.
ASKING_VARIABLES = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def add_otel_argument(parser: argparse.ArgumentParser) -> None:
    """``--otel``, shared by serve and run."""
    parser.add_argument(
        "--otel",
        action="store_true",
        help="trace jobs with OpenTelemetry, exported as the OTEL_* environment variables say "
        "(on without this flag when one of them names an exporter or an endpoint; needs "
        "trio-batch[otel-sdk])",
    )


def _nothing() -> None:
    """Nothing to flush."""


def setup_tracing(
    force: bool, environ: Mapping[str, str] = os.environ
) -> tuple[Tracing, Callable[[], None]]:
    """The tracing for the command, and what flushes it at exit (call it after ``trio.run``).

    Raises ValueError for ``--otel`` without the SDK, or an exporter named in
    ``OTEL_TRACES_EXPORTER`` that is not ``otlp``, ``console`` or ``none``. The SDK's tracer
    provider is made the global one, so that spans of an instrumented fetch function join the
    job's trace. The flush waits for at most the exporter's own timeouts.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return NO_TRACING, _nothing
    if not force and not any(environ.get(name) for name in ASKING_VARIABLES):
        return NO_TRACING, _nothing
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        if not force:
            return NO_TRACING, _nothing  # asked by the environment, but no SDK here: as without
        raise ValueError(
            "--otel needs the OpenTelemetry SDK: pip install 'trio-batch[otel-sdk]'"
        ) from None
    from ..runner import otel_tracing

    exporters = [_exporter(name, environ) for name in _exporter_names(environ)]
    named = "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    default_name = (
        {} if environ.get("OTEL_SERVICE_NAME") or named else {"service.name": "trio-batch"}
    )
    provider = TracerProvider(resource=Resource.create(default_name))
    for exporter in exporters:
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return otel_tracing(provider), provider.shutdown


def _exporter_names(environ: Mapping[str, str]) -> list[str]:
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    return [name for name in names if name] or ["otlp"]


def _exporter(name: str, environ: Mapping[str, str]) -> Any:
    """The span exporter ``name`` stands for in ``OTEL_TRACES_EXPORTER`` (None for ``none``)."""
    if name == "none":
        return None
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise ValueError(
            f"OTEL_TRACES_EXPORTER: unsupported exporter {name!r} (otlp, console or none)"
        )
    protocol = environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    if protocol.strip() not in ("", "http/protobuf"):
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL: only http/protobuf is supported, not {protocol!r}"
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ValueError(
            "the otlp exporter needs opentelemetry-exporter-otlp-proto-http: "
            "pip install 'trio-batch[otel-sdk]'"
        ) from None
    return OTLPSpanExporter()
