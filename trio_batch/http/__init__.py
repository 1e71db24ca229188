"""The HTTP service: ``trio-batch serve``, a JSON API over the runner.

A Starlette application (ASGI; it runs on trio through anyio) served by Hypercorn's trio
worker. The runner lives in the application's lifespan: it opens when the server starts and,
when the server stops, every job still live is marked ``failed`` with error ``"shutdown"``.
Needs the ``http`` extra (``pip install 'trio-batch[http]'``).

Endpoints (see ``GET /openapi.json`` for the full description):

- ``POST /v1/batches`` submits ``{"targets": [...], "caller_class"?: ...}``: ``201`` for a new
  job, ``200`` for the same batch submitted again within its lease.
- ``GET /v1/batches/{id}``: the job, its counts per target status, its targets and results.
- ``POST /v1/batches/{id}/cancel``: cancel a live job (``409`` once it has finished).
- ``GET /v1/batches/{id}/events``: Server-Sent Events, one per target outcome as it is stored,
  then the terminal job.
- ``GET /healthz``, ``GET /metrics`` (Prometheus text format), ``GET /openapi.json``.
- ``GET /ui/``: the dashboard, a page in the browser over the endpoints above (``/``
  redirects there).

Errors are RFC 9457 problem documents (``application/problem+json``). Callers authenticate with
``Authorization: Bearer <token>`` (:class:`TokenAuth`), or, behind a trusted gateway, with a
header naming the caller (:class:`HeaderAuth`); a caller only ever sees its own jobs.

Build an application in-process with :func:`create_app` and serve it with :func:`serve`; the
command line is ``trio-batch serve`` (:mod:`trio_batch.cli`).

The package's modules: ``_auth`` (who a request comes from), ``_problems`` (problem documents:
the table from typed errors to status, kind and title), ``_bodies`` (the JSON read and
written), ``_service`` (what the handlers share), ``_events`` (the event stream), ``_metrics``
(Prometheus), ``_dashboard`` (the dashboard's files in ``static/`` and their headers), ``_app``
(:func:`create_app`: routes, handlers, lifespan), ``_serve`` (:func:`serve`) and ``_openapi``
(the OpenAPI document). The built-in fetch function and the SSRF policy live in
:mod:`trio_batch.fetchers`.
"""

from ..fetchers import DestinationPolicy, DestinationRefused, builtin_fetch, load_fetch
from ._app import DEFAULT_MAX_BODY, create_app
from ._auth import DEFAULT_CALLER_CLASS, MIN_TOKEN_LENGTH, Auth, Caller, HeaderAuth, TokenAuth
from ._problems import PROBLEM_JSON
from ._serve import serve

__all__ = [
    "DEFAULT_CALLER_CLASS",
    "DEFAULT_MAX_BODY",
    "MIN_TOKEN_LENGTH",
    "PROBLEM_JSON",
    "Auth",
    "Caller",
    "DestinationPolicy",
    "DestinationRefused",
    "HeaderAuth",
    "TokenAuth",
    "builtin_fetch",
    "create_app",
    "load_fetch",
    "serve",
]
