"""Running the app: bind the address first, refuse what is not allowed, then serve with uvicorn.

- The socket is bound here (port 0 picks a free one), so the one line printed names the real address and the
  ``Host`` check knows the port.
- An address other than loopback needs at least one active token (``piw tokens create``); otherwise one line and
  exit 2, before anything listens.
- On loopback with no token created yet, a session token (scope ``operate``, in memory, gone when the server
  stops) is printed once on this terminal, as ``piw view --serve`` prints its address.
- uvicorn runs with no access log and no log configuration of its own: no request line (which may carry a
  token in a query) and no header is ever logged.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from piw.errors import UsageError
from piw.store.db.database import now_ms
from piw.store.db.tokens import TokenRow, open_token_book
from piw.web.access import Authenticator, is_loopback, new_token, require_tokens_off_loopback, token_digest
from piw.web.guard import WebGuard, host_with_port

DEFAULT_PORT = 8780


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; one line naming what to change when that is not possible."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise UsageError(
            f"Cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --host/--port."
        ) from None
    sock.set_inheritable(True)
    return sock


def session_token(home: Path, host: str) -> tuple[str, TokenRow] | None:
    """A token for this session only, when it serves loopback and no token was created yet."""
    if not is_loopback(host) or open_token_book(home).any_active(now_ms()):
        return None
    token = new_token()
    return token, TokenRow("session", "operate", token_digest(token), now_ms())


def extra_routers(home: Path) -> list[Any]:
    """The channels' answer page (issue 31.3), when this piw has it: ``answer_router(home)`` of
    ``piw.channels.page_routes``."""
    import importlib

    try:
        module = importlib.import_module("piw.channels.page_routes")
    except ModuleNotFoundError as exc:
        if exc.name not in ("piw.channels", "piw.channels.page_routes"):
            raise
        return []
    return [module.answer_router(home)]


def serve(
    home: Path,
    host: str,
    port: int,
    *,
    allowed_hosts: Sequence[str] = (),
    cors_origins: Sequence[str] = (),
) -> None:
    """Serve the API until SIGINT or SIGTERM."""
    import uvicorn

    from piw.serve.app import create_app

    require_tokens_off_loopback(home, host, "piw serve")
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    guard = WebGuard(host, bound, allowed_hosts=tuple(allowed_hosts))
    session = session_token(home, host)
    authenticator = Authenticator(home, session=session[1] if session else None)
    app = create_app(home, authenticator, guard=guard, cors_origins=cors_origins, routers=extra_routers(home))
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    print(f"Serving the piw API on http://{host_with_port(shown, bound)} (Ctrl-C stops).", flush=True)
    if session is not None:
        print(
            "No API token exists yet; this session's token (scope operate, valid until it stops): "
            f"{session[0]}  (create lasting ones with 'piw tokens create').",
            file=sys.stderr,
            flush=True,
        )
    config = uvicorn.Config(
        app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=3
    )
    uvicorn.Server(config).run(sockets=[sock])
