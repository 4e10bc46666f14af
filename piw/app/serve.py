"""``piw view --serve``: the same app in a browser, through textual-serve, behind :mod:`piw.web.guard`.

textual-serve runs one ``piw view`` process per websocket (with Textual's web driver) and relays it. Its aiohttp
app is used as it ships, with four changes (``docs/guarantees.md``, "Security"):

- one middleware applies :class:`~piw.web.guard.WebGuard` to every request (host, token, origin) and holds a
  session slot for each websocket while it is open; a first page load with ``?token=…`` sets the cookie and is
  sent back to the same address without the token, so it stays out of the address bar and the history;
- the page is rendered with addresses taken from the request's own (checked) ``Host``, so its websocket goes
  where the page came from and carries the cookie, whichever allowed name the browser used;
- no access log (the first request's address holds the token) and no banner: the one line printed, once the
  port is bound, is the address with the token, on the terminal of the person who started it;
- every response says ``Referrer-Policy: no-referrer`` and may not be framed.

The viewer itself only reads runs: no key, pane or screen of :class:`~piw.app.viewer.ViewerApp` pauses,
cancels or answers a run, so nothing a session reaches can change one.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import signal
import sys
from pathlib import Path

import aiohttp_jinja2
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from textual_serve.server import Server, to_int
from yarl import URL

from piw.errors import UsageError
from piw.web.guard import DEFAULT_MAX_SESSIONS, SECURITY_HEADERS, TOKEN_PARAM, Refusal, WebGuard

LOOPBACK = "127.0.0.1"
WEBSOCKET_PATH = "/ws"
SHUTDOWN_S = 3.0  # Ctrl-C closes open sessions after this long (aiohttp waits 60 s for open websockets)


def view_command(run_id: str | None) -> str:
    """The command textual-serve starts per browser session: this interpreter running ``piw view``."""
    args = [sys.executable, "-m", "piw", "view"]
    if run_id:
        args.append(run_id)
    return shlex.join(args)


def refused(refusal: Refusal) -> web.Response:
    return web.Response(status=refusal.status, text=refusal.reason + "\n")


def guard_middleware(guard: WebGuard) -> Middleware:
    """The aiohttp middleware that puts ``guard`` in front of every route textual-serve has."""

    @web.middleware
    async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
        websocket = (
            request.path == WEBSOCKET_PATH or request.headers.get("Upgrade", "").lower() == "websocket"
        )
        refusal = guard.check(
            host=request.headers.get("Host"),
            origin=request.headers.get("Origin"),
            query_token=request.query.get(TOKEN_PARAM),
            cookie_token=request.cookies.get(guard.cookie_name),
            websocket=websocket,
            client=request.remote or "?",
        )
        if refusal is not None:
            return refused(refusal)
        if not websocket:
            if request.path == "/" and TOKEN_PARAM in request.query:
                rest = {key: value for key, value in request.query.items() if key != TOKEN_PARAM}
                location = str(URL("/").with_query(rest))  # always this server's page: no open redirect
                return web.Response(
                    status=303, headers={"Location": location, "Set-Cookie": guard.cookie_header()}
                )
            return await handler(request)
        full = guard.open_session()
        if full is not None:
            return refused(full)
        try:
            return await handler(request)
        finally:
            guard.close_session()

    return guarded


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)


class GuardedServer(Server):
    """textual-serve's server with :class:`WebGuard` in front, addresses from the request, and no token in logs."""

    def __init__(self, command: str, guard: WebGuard) -> None:
        super().__init__(command, host=guard.host, port=guard.port, title="piw view")
        self.guard = guard

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(guard_middleware(self.guard))
        app.on_response_prepare.append(add_security_headers)
        return app

    async def on_startup(self, app: web.Application) -> None:
        """No banner: :meth:`announce` prints the one line, once the port is bound."""

    def announce(self, *_: object) -> None:
        print(f"Serving piw view on {self.guard.url} (Ctrl-C stops).", file=sys.stderr, flush=True)

    async def handle_index(self, request: web.Request) -> web.Response:
        """The textual-serve page, its static files and websocket addressed at the host the browser used."""
        scheme = "wss" if request.secure else "ws"
        context = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": f"{scheme}://{request.host}{WEBSOCKET_PATH}",
            "config": {"static": {"url": "/static/"}},
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    def serve(self, debug: bool = False) -> None:
        """Serve until SIGINT or SIGTERM, as textual-serve does, without its access log and banner."""
        self.debug = debug
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        loop.add_signal_handler(signal.SIGINT, self.request_exit)
        loop.add_signal_handler(signal.SIGTERM, self.request_exit)
        web.run_app(
            self._make_app(),
            host=self.host,
            port=self.port,
            handle_signals=False,
            loop=loop,
            access_log=None,
            print=self.announce,
            shutdown_timeout=SHUTDOWN_S,
        )


def serve(
    home: Path,
    run_id: str | None,
    host: str,
    port: int,
    *,
    allowed_hosts: tuple[str, ...] = (),
    max_sessions: int = DEFAULT_MAX_SESSIONS,
) -> None:
    """Serve the viewer until interrupted (``PIW_HOME`` is passed on through the environment)."""
    from piw.web.access import Authenticator

    api_tokens = Authenticator(home)
    guard = WebGuard(
        host,
        port,
        allowed_hosts=allowed_hosts,
        max_sessions=max_sessions,
        accepts=lambda token: api_tokens.lookup(token) is not None,
    )
    logging.getLogger("aiohttp.access").disabled = True  # belt and braces: no request line is ever logged
    try:
        GuardedServer(view_command(run_id), guard).serve()
    except OSError as exc:  # the address is not on this machine, or the port is taken
        raise UsageError(
            f"Cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --host/--port."
        ) from exc
