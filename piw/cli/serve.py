"""``piw serve``: the HTTP API for runs, answers and gates (``docs/serve.md``).

FastAPI and uvicorn (``piw[serve]``) are imported inside the command only.
"""

from __future__ import annotations

from typing import Annotated

import typer

from piw.cli.app import app
from piw.cli.database import DatabaseOption, command_home
from piw.errors import UsageError


@app.command()
def serve(
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (default loopback; others need API tokens).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: a free one).")] = 8780,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host", metavar="NAME", help="Also answer requests addressed to NAME (repeatable)."
        ),
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            metavar="ORIGIN",
            help="Let browser pages from ORIGIN (https://dash.example) call the API (repeatable; off by default).",
        ),
    ] = None,
    database: DatabaseOption = None,
) -> int:
    """Serve an HTTP API over the runs: read them, answer gates, pause, resume, cancel, start runs."""
    if not 0 <= port < 65536:
        raise UsageError(f"--port {port} is not a port number (0-65535).")
    from piw.web.guard import allowed_host_names

    names = allowed_host_names(allow_host)
    origins = tuple(origin.strip().rstrip("/") for origin in cors_origin or ())
    for origin in origins:
        if not origin.startswith(("http://", "https://")) or origin.count("/") != 2:
            raise UsageError(f"--cors-origin {origin!r} must be an origin such as https://dash.example.")
    import importlib.util

    if any(importlib.util.find_spec(name) is None for name in ("fastapi", "uvicorn")):
        raise UsageError("piw serve needs FastAPI and uvicorn: pip install 'piw[serve]'.")
    from piw.serve.server import serve as run_server

    run_server(command_home(database), host, port, allowed_hosts=names, cors_origins=origins)
    return 0
