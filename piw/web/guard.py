"""The rules that keep a served piw page private to the person who started it (``docs/guarantees.md``, "Security").

A server on 127.0.0.1 is not private by itself: any web page the user visits can open a websocket to it, a DNS
rebinding attack makes a foreign name resolve to it, and every other user of the machine can connect to it. So
each request must pass four checks, in this order, before it reaches the app:

1. **Host**: the ``Host`` header names the bound address (``host:port``) or a name given with ``--allow-host``
   (on a wildcard address, any IP address at the port); anything else may be a rebound foreign name (403).
2. **Token**: a random token (``secrets.token_urlsafe(32)``, as Jupyter does) arrives in the query
   (``?token=…``, the printed URL) or in the cookie a first load sets; compared with :func:`hmac.compare_digest`
   (403). An API token of ``piw tokens`` is accepted too when :attr:`WebGuard.accepts` is set (``piw view
   --serve`` sets it: ``docs/serve.md``, "Access"); a client address with too many failed tokens is refused
   (429) until its window passes (``piw.web.access.FailureLimiter``).
3. **Origin**: a websocket must carry an ``Origin`` that is this server's own (``http://`` or ``https://`` and
   the request's ``Host``); browsers always send one, so a missing one is refused too. Any other request that
   carries an ``Origin`` must match as well (403).
4. **Sessions**: at most ``max_sessions`` websockets at once, each one a viewer process (503).

Nothing here knows a web framework: :mod:`piw.app.serve` applies it to textual-serve's aiohttp app, and a later
server (a FastAPI one, say) can apply the same object to its own. The token lives in this object only; the printed
:attr:`WebGuard.url` is the one place it is shown.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from piw.errors import UsageError
from piw.web.access import RATE_LIMITED, FailureLimiter

TOKEN_PARAM = "token"
DEFAULT_MAX_SESSIONS = 4
WILDCARDS = ("0.0.0.0", "::", "")
SECURITY_HEADERS = {
    "Referrer-Policy": "no-referrer",  # the token URL is never sent on to another site
    "X-Frame-Options": "DENY",  # no foreign page frames the viewer to steer it
    "Content-Security-Policy": "frame-ancestors 'none'",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class Refusal:
    """Why a request is turned away: an HTTP status and one line of plain text for the person reading it."""

    status: int
    reason: str


def host_with_port(name: str, port: int) -> str:
    """``name`` as a ``Host`` header spells it for ``port``: ``127.0.0.1:8765``, ``[::1]:8765``, ``box:8765``.

    A name that already carries a port (``box:443``, ``[::1]:9000``) is kept as given, for a proxy in front.
    """
    name = name.strip().lower()
    if name.startswith("["):
        return name if not name.endswith("]") else f"{name}:{port}"
    if name.count(":") > 1:  # a bare IPv6 address
        return f"[{name}]:{port}"
    return name if ":" in name else f"{name}:{port}"


def allowed_host_names(given: Sequence[str] | None) -> tuple[str, ...]:
    """The ``--allow-host`` names of ``piw serve`` and ``piw view --serve``, stripped, for
    :attr:`WebGuard.allowed_hosts`. One that is empty or holds white space or URL punctuation could never be a
    ``Host`` header's name, so it is refused (``UsageError``) before the server starts rather than matching nothing.
    """
    names = tuple(name.strip() for name in given or ())
    for name in names:
        if not name or any(char.isspace() or char in "/?#@," for char in name):
            raise UsageError(f"--allow-host {name!r} is not a host name or address.")
    return names


def split_host(host: str) -> tuple[str, str | None]:
    """A ``Host`` header's name (IPv6 without brackets) and port: ``[::1]:80`` → ``("::1", "80")``."""
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        return name, rest[1:] if rest.startswith(":") else None
    if host.count(":") == 1:
        name, _, port = host.partition(":")
        return name, port
    return host, None


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison (any text: ``compare_digest`` takes only ASCII ``str``, so compare bytes)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode("utf-8"))


@dataclass
class WebGuard:
    """One server's token, accepted hosts and session slots; :meth:`check` decides each request."""

    host: str
    port: int
    allowed_hosts: tuple[str, ...] = ()
    max_sessions: int = DEFAULT_MAX_SESSIONS
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    accepts: Callable[[str], bool] | None = field(default=None, repr=False)
    """Also accept these tokens (an active API token of ``piw tokens``), besides :attr:`token`."""
    limiter: FailureLimiter = field(default_factory=FailureLimiter, repr=False)
    _open: int = field(default=0, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")

    @property
    def hosts(self) -> frozenset[str]:
        """The ``Host`` header values accepted by name (lower case); a browser omits the port when it is 80."""
        names = [self.host, *self.allowed_hosts]
        accepted = {host_with_port(name, self.port) for name in names if name.strip()}
        if self.port == 80:
            accepted |= {value.removesuffix(":80") for value in accepted}
        return frozenset(accepted)

    def host_allowed(self, host: str | None) -> bool:
        """A bound or allowed name; on a wildcard address (``0.0.0.0``, ``::``) also any IP address at this port,
        since a rebound name always arrives as the name, never as the address it was rebound to."""
        if host is None:
            return False
        host = host.strip().lower()
        if host in self.hosts:
            return True
        if self.host not in WILDCARDS:
            return False
        address, port = split_host(host)
        if (port or "80") != str(self.port):
            return False
        try:
            ipaddress.ip_address(address)
        except ValueError:
            return False
        return True

    @property
    def cookie_name(self) -> str:
        """Browsers share cookies between the ports of one host, so each port's server has its own name."""
        return f"piw-token-{self.port}"

    @property
    def url(self) -> str:
        """The address to open, token included: printed once, on the terminal of the person who started it."""
        shown = self.host
        if shown in WILDCARDS:
            shown = self.allowed_hosts[0] if self.allowed_hosts else "127.0.0.1"
        return f"http://{host_with_port(shown, self.port)}/?{TOKEN_PARAM}={self.token}"

    def cookie_header(self) -> str:
        """The ``Set-Cookie`` value a first load with the right token gets, so the page and its socket need no
        token in their address afterwards. HttpOnly: no script reads it; SameSite=Strict: no other site sends
        it."""
        return f"{self.cookie_name}={self.token}; Path=/; HttpOnly; SameSite=Strict"

    def check(
        self,
        *,
        host: str | None,
        origin: str | None,
        query_token: str | None,
        cookie_token: str | None,
        websocket: bool,
        client: str = "?",
    ) -> Refusal | None:
        """``None`` when the request may go on; otherwise the refusal to send instead. ``client`` is the peer's
        address, for the limit on failed tokens."""
        if host is None or not self.host_allowed(host):
            return Refusal(
                403,
                "This server answers only to the address it printed and to names given with --allow-host; "
                "this request named another host.",
            )
        if self.limiter.blocked(client):
            return Refusal(429, RATE_LIMITED)
        given = [token for token in (query_token, cookie_token) if token]
        if not any(self._accepted(token) for token in given):
            self.limiter.failed(client)
            return Refusal(
                403,
                "This page needs its token: open the full address piw printed when it started (…/?token=…).",
            )
        if origin is None and websocket:
            return Refusal(403, "A websocket needs an Origin header naming this server.")
        if origin is not None and origin.strip().lower() not in {
            f"{scheme}://{host.strip().lower()}" for scheme in ("http", "https")
        }:
            return Refusal(403, "Requests from another site's page are refused.")
        return None

    def _accepted(self, token: str) -> bool:
        if same_secret(token, self.token):
            return True
        return self.accepts is not None and self.accepts(token)

    def open_session(self) -> Refusal | None:
        """Take a session slot (release it with :meth:`close_session`); a refusal when all are in use."""
        with self._lock:
            if self._open >= self.max_sessions:
                return Refusal(
                    503,
                    f"All {self.max_sessions} sessions are in use: close another tab of this viewer and reload "
                    "(or restart it with a larger --max-sessions).",
                )
            self._open += 1
            return None

    def close_session(self) -> None:
        with self._lock:
            self._open = max(0, self._open - 1)

    @property
    def sessions_open(self) -> int:
        return self._open
