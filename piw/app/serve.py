"""``piw view --serve``: the same app in a browser, through textual-serve.

textual-serve runs one ``piw view`` process per browser tab (with Textual's web driver) and relays it over a
websocket. It binds to loopback unless ``--host`` says otherwise; anyone who can reach the port can read every
run in ``PIW_HOME`` (the viewer is read-only, but the data may be private), hence the warning.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from piw.errors import UsageError

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def view_command(run_id: str | None) -> str:
    """The command textual-serve starts per browser session: this interpreter running ``piw view``."""
    args = [sys.executable, "-m", "piw", "view"]
    if run_id:
        args.append(run_id)
    return shlex.join(args)


def serve(home: Path, run_id: str | None, host: str, port: int) -> None:
    """Serve the viewer until interrupted (``PIW_HOME`` is passed on through the environment)."""
    from textual_serve.server import Server

    server = Server(view_command(run_id), host=host, port=port, title="piw view")
    try:
        server.serve()
    except OSError as exc:  # the address is not on this machine, or the port is taken
        raise UsageError(
            f"Cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --host/--port."
        ) from exc
