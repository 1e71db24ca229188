"""The dashboard: static files shipped in ``static/``, served at ``/ui/`` with strict headers.

The page is plain HTML, CSS and JavaScript (no build step, nothing from another origin) and
talks to the service only through the public JSON API with the caller's bearer token, so caller
isolation is exactly the API's. The server's part is only this: a fixed set of files, read once
when the application is built, each sent with headers that forbid inline script and style,
framing, MIME sniffing and HTML sinks fed with strings (Trusted Types).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ._problems import not_found

__all__ = ["DASHBOARD_HEADERS", "dashboard_routes"]

#: Sent with every dashboard file. ``require-trusted-types-for 'script'`` with no policy
#: allowed makes assigning a string to ``innerHTML`` (or any other HTML sink) throw: results
#: are untrusted text, and this turns a slip into an error rather than a script run.
DASHBOARD_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": "; ".join(
        (
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self'",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
            "require-trusted-types-for 'script'",
            "trusted-types 'none'",
        )
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-cache",
}

#: The files the dashboard serves, by name, with their media types; nothing else is served.
_FILES: Mapping[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


def dashboard_routes() -> list[BaseRoute]:
    """The routes serving the dashboard: ``/ui/`` and its files, and ``/`` and ``/ui``
    redirecting there."""
    static = resources.files(__package__) / "static"
    files = {name: (static / name).read_bytes() for name in _FILES}

    def file_response(name: str) -> Response:
        return Response(files[name], media_type=_FILES[name], headers=dict(DASHBOARD_HEADERS))

    async def index(request: Request) -> Response:
        return file_response("index.html")

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in files:
            raise not_found("no such dashboard file")
        return file_response(name)

    async def root(request: Request) -> Response:
        # A fixed path, never one built from the request's Host header.
        return RedirectResponse("/ui/", status_code=303)

    return [
        Route("/", root, methods=["GET"]),
        Route("/ui", root, methods=["GET"]),  # without the slash, as people type it
        Route("/ui/", index, methods=["GET"]),
        Route("/ui/{name}", asset, methods=["GET"]),
    ]
