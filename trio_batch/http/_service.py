"""What the request handlers share: the runner, the metrics, and who the caller is."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import trio
from starlette.requests import Request

from .._config import Config
from .._errors import RunnerClosed
from .._model import Job
from .._tracing import NO_TRACING, Tracing
from ..runner import FetchFunc, Runner
from ._auth import Auth, Caller
from ._metrics import Metrics
from ._problems import Problem, not_found

__all__ = ["Service"]

#: Methods that change nothing; any other is refused when another site makes it.
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(eq=False)
class Service:
    """Everything the handlers share; the runner exists while the lifespan runs."""

    db: str
    fetch: FetchFunc
    config: Config
    auth: Auth
    max_body: int
    body_timeout: float
    retry_after: int
    heartbeat: float
    now: Callable[[], float]
    logger: logging.Logger | None
    tracing: Tracing = NO_TRACING
    #: Whether /metrics (unauthenticated) names each host the fetcher reached.
    host_metrics: bool = False
    metrics: Metrics = field(default_factory=Metrics)
    runner_: Runner | None = None
    stopping: trio.Event = field(default_factory=trio.Event)

    @staticmethod
    def of(request: Request) -> Service:
        """The service ``request``'s application holds."""
        service: Service = request.app.state.service
        return service

    @property
    def runner(self) -> Runner:
        """The running runner; raises :class:`RunnerClosed` (503) once shutdown has begun."""
        if self.runner_ is None or self.stopping.is_set():
            raise RunnerClosed("the service is shutting down")
        return self.runner_

    def begin_shutdown(self) -> None:
        """Refuse new jobs and end event streams; the lifespan then shuts the runner down."""
        self.stopping.set()

    def caller(self, request: Request) -> Caller:
        """Who ``request`` comes from; raises a 401 problem if its credentials name no one.

        A request that would change something and that the browser labels as made by another
        site is refused first (403): behind a gateway that adds the user's identity from a
        cookie (``--caller-header``), a page elsewhere could otherwise cancel the user's jobs
        with a bodiless POST, which needs no CORS preflight. Clients that are not browsers send
        no ``Sec-Fetch-Site`` and are not affected.
        """
        if request.method not in _SAFE_METHODS:
            site = request.headers.get("sec-fetch-site", "").strip().lower()
            if site in ("cross-site", "same-site"):
                raise Problem(
                    403,
                    "cross-site",
                    "Forbidden",
                    f"the browser says another site made this request (Sec-Fetch-Site: {site}); "
                    "use the service's own pages or a client that is not a browser",
                )
        caller = self.auth.authenticate(request.headers)
        if caller is None:
            raise Problem(
                401,
                "unauthorized",
                "Unauthorized",
                "missing or invalid credentials",
                headers={"WWW-Authenticate": self.auth.challenge},
            )
        return caller

    def owned(self, job: Job | None, caller: Caller, what: str = "no such job") -> Job:
        """``job`` if it exists, has not lapsed and belongs to ``caller``; 404 otherwise."""
        if job is None or job.caller != caller.name:
            raise not_found(what)  # another caller's job reads exactly like an unknown one
        return job

    async def owned_job(self, request: Request, caller: Caller) -> Job:
        """The job in the path, without its targets (see :meth:`owned`)."""
        runner = self.runner
        return self.owned(
            await runner.store.get_job(request.path_params["id"], now=self.now()), caller
        )
