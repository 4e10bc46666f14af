"""The ``piw serve`` app: routes, token checks, error mapping, CORS only when configured (``docs/serve.md``).

:func:`create_app` is what both ``piw serve`` and tests build; a channel's answer page mounts its own router on
the result (``app.include_router``). Every response says ``Cache-Control: no-store`` and may not be framed; a
request whose ``Host`` header names another server (a DNS rebinding of a foreign name) is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from piw.errors import PiwError
from piw.serve import acts, events, reads
from piw.serve.errors import error_body, invalid_request, piw_error
from piw.web.access import Authenticator
from piw.web.guard import SECURITY_HEADERS, WebGuard

API_TITLE = "piw"


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return JSONResponse(error_body(str(exc.detail)), status_code=exc.status_code, headers=exc.headers)


def create_app(
    home: Path,
    authenticator: Authenticator | None = None,
    *,
    guard: WebGuard | None = None,
    cors_origins: Sequence[str] = (),
    routers: Sequence[APIRouter] = (),
) -> FastAPI:
    """The API over ``home``'s runs. ``guard`` (the bound address) refuses requests for other hosts; ``None``
    accepts any ``Host`` (tests that build the app in process). ``cors_origins``: the web origins allowed to call
    it from a browser (none by default: no CORS header is ever sent). ``routers`` are mounted as they are (they
    do their own access checks: the channels' answer page takes single-use answer tokens)."""
    from piw import __version__

    app = FastAPI(
        title=API_TITLE,
        version=__version__,
        description="Runs, answers and gates of piw over HTTP (docs/serve.md). Authorization: Bearer TOKEN.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.home = home
    app.state.authenticator = authenticator or Authenticator(home)
    app.add_exception_handler(PiwError, piw_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    for module in (reads, acts, events):
        app.include_router(module.router)
    for router in routers:
        app.include_router(router)

    @app.middleware("http")
    async def checked(request: Request, call_next):  # type: ignore[no-untyped-def]
        if guard is not None and not guard.host_allowed(request.headers.get("host")):
            response: Response = JSONResponse(
                error_body("This server answers only to the address it was started on."), status_code=403
            )
        else:
            response = await call_next(request)
        for (
            name,
            value,
        ) in SECURITY_HEADERS.items():  # a router's stricter policy (the answer page's CSP) stays
            response.headers.setdefault(name, value)
        return response

    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        )
    return app
