"""``piw view``: the full-screen run viewer (Textual), on this terminal or in a browser with ``--serve``.

Textual is imported only inside the command, so ``piw --help`` and every other command start as fast as before.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from piw.cli.app import app
from piw.cli.database import DatabaseOption, command_home
from piw.errors import PiwError, UsageError
from piw.store.runref import resolve_run_id

DEFAULT_PORT = 8765


@app.command()
def view(
    run_id: Annotated[
        str | None, typer.Argument(help="The run to open (id, prefix, latest, -1 …); default: the runs list.")
    ] = None,
    serve: Annotated[bool, typer.Option("--serve", help="Serve the viewer to a browser instead.")] = False,
    port: Annotated[int, typer.Option("--port", help="Port for --serve.")] = DEFAULT_PORT,
    host: Annotated[
        str, typer.Option("--host", help="Address for --serve (default loopback; others get a warning).")
    ] = "127.0.0.1",
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            metavar="NAME",
            help="Also answer --serve requests addressed to NAME (repeatable), e.g. the machine's name.",
        ),
    ] = None,
    max_sessions: Annotated[
        int, typer.Option("--max-sessions", help="Browser sessions --serve runs at once (each one a viewer).")
    ] = 4,
    database: DatabaseOption = None,
) -> int:
    """Browse runs full-screen: the runs list, a run's graph and panes, time travel, live following."""
    home = command_home(database)
    message = None
    resolved = None
    if run_id is not None:
        try:
            resolved = resolve_run_id(home, run_id)
        except PiwError as exc:
            message = str(exc)  # the viewer opens on the runs list and says so, rather than failing
    if serve:
        from piw.app.serve import serve as serve_app
        from piw.web.access import is_loopback, require_tokens_off_loopback
        from piw.web.guard import allowed_host_names

        if not 0 < port < 65536:
            raise UsageError(f"--port {port} is not a port number (1–65535).")
        if max_sessions < 1:
            raise UsageError(f"--max-sessions {max_sessions} must be at least 1.")
        names = allowed_host_names(allow_host)
        if message:
            raise UsageError(message)
        require_tokens_off_loopback(home, host, "piw view --serve")
        if not is_loopback(host):
            print(
                f"Warning: serving on {host}, not loopback, over plain HTTP: anyone who can reach port {port} "
                f"and sees the address with its token can read every run in {home}.",
                file=sys.stderr,
            )
        if database:  # each browser session's 'piw view' (a reader, never a writer) uses the same database
            os.environ["PIW_DATABASE"] = database
        serve_app(home, resolved, host, port, allowed_hosts=names, max_sessions=max_sessions)
        return 0
    web = "TEXTUAL_DRIVER" in os.environ  # started by textual-serve for one browser tab
    if not web and not (sys.stdout.isatty() and sys.stdin.isatty()):
        raise UsageError(
            "piw view needs a terminal; for a pipe or a script use 'piw inspect RUN --view VIEW' "
            "or 'piw watch RUN'."
        )
    from piw.app.viewer import ViewerApp

    ViewerApp(home, resolved, message=message, ansi_color=not web).run()
    return 0
