"""Who may reach a served piw: API tokens by scope, and a limit on failed attempts (``docs/serve.md``, "Access").

``piw serve`` and ``piw view --serve`` share these rules:

- a token is ``piw_`` and 32 random bytes (url-safe base64); only its SHA-256 is stored (``piw.store.db.tokens``),
  so a token is checked by hashing what the client sent and looking the digest up: the lookup never compares a
  secret, and an unknown, expired, revoked or malformed token all fail the same way, with the same line;
- scopes are ordered: ``read`` < ``answer`` < ``operate`` (:func:`allows`);
- failed attempts are counted per client address: after :data:`MAX_FAILURES` within :data:`WINDOW_S` seconds that
  address is refused (429) until the window has passed, whatever it sends, so a token cannot be guessed;
- any address other than loopback needs at least one active token (:func:`require_tokens_off_loopback`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from piw.errors import UsageError
from piw.store.db.database import now_ms
from piw.store.db.tokens import SCOPES, Scope, TokenRow, open_token_book

TOKEN_PREFIX = "piw_"
MAX_FAILURES = 10
WINDOW_S = 60.0
AUTH_FAILED = "Authentication failed: send a valid token as 'Authorization: Bearer TOKEN' (see 'piw tokens')."
"""The one line for every failed authentication: it never says which part was wrong."""
RATE_LIMITED = "Too many failed authentication attempts from this address; wait a minute and try again."
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
_EXPIRY = re.compile(r"^(\d{1,6})([mhdw])$")
_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def allows(scope: str, needed: Scope) -> bool:
    """Whether a token of ``scope`` may do what needs ``needed``."""
    return scope in SCOPES and SCOPES.index(scope) >= SCOPES.index(needed)


def parse_expiry(text: str | None) -> int | None:
    """``30d``, ``12h``, ``90m``, ``2w`` as milliseconds (``None``: never expires); one line naming the option."""
    if text is None:
        return None
    match = _EXPIRY.match(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise UsageError(f"--expires {text!r} is not a duration; use e.g. 90m, 12h, 30d or 2w.")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def create_token(home: Path, name: str, scope: str, expires: str | None = None) -> tuple[str, TokenRow]:
    """A new token for ``name``: the secret (shown once, never stored) and its row."""
    if not _NAME.match(name):
        raise UsageError(
            f"Token name {name!r} must be 1-64 letters, digits, '.', '_', '-' or '@', starting with a letter or digit."
        )
    if scope not in SCOPES:
        raise UsageError(f"--scope {scope!r} is not a scope; use one of: {', '.join(SCOPES)}.")
    lifetime = parse_expiry(expires)
    now = now_ms()
    token = new_token()
    row = TokenRow(
        name,
        scope,
        token_digest(token),
        now,
        None if lifetime is None else now + lifetime,
    )
    if not open_token_book(home).add(row):
        raise UsageError(
            f"A token named {name!r} exists; revoke it first ('piw tokens revoke {name}') or pick another name."
        )
    return token, row


def revoke_token(home: Path, name: str) -> None:
    if not open_token_book(home).revoke(name, now_ms()):
        raise UsageError(f"No active token is named {name!r}; 'piw tokens list' shows them.")


def require_tokens_off_loopback(home: Path, host: str, command: str) -> None:
    """Refuse (one line, exit 2) to listen on an address other than loopback while no active token exists."""
    if is_loopback(host):
        return
    if not open_token_book(home).any_active(now_ms()):
        raise UsageError(
            f"{command} on {host} (not loopback) needs API tokens; create one with "
            "'piw tokens create NAME --scope read' first, or bind 127.0.0.1."
        )


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


@dataclass
class FailureLimiter:
    """Failed authentications per client address in a sliding window; :meth:`blocked` once there were too many."""

    max_failures: int = MAX_FAILURES
    window_s: float = WINDOW_S
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self._failures.setdefault(client, deque())
        while times and now - times[0] > self.window_s:
            times.popleft()
        return times

    def blocked(self, client: str) -> bool:
        with self._lock:
            return len(self._recent(client, self.clock())) >= self.max_failures

    def failed(self, client: str) -> None:
        with self._lock:
            now = self.clock()
            self._recent(client, now).append(now)
            if len(self._failures) > 10_000:  # many addresses: forget those whose window passed
                for key in [
                    key
                    for key, times in self._failures.items()
                    if not times or now - times[-1] > self.window_s
                ]:
                    del self._failures[key]


@dataclass
class Authenticator:
    """Checks a presented token against the home's token book (and, for ``piw serve`` on loopback with no token
    created yet, the session token it printed)."""

    home: Path
    session: TokenRow | None = None
    limiter: FailureLimiter = field(default_factory=FailureLimiter)

    def lookup(self, token: str | None) -> TokenRow | None:
        """The active token row for ``token``, or ``None`` (whatever is wrong with it)."""
        if not token or len(token) > 512:
            return None
        digest = token_digest(token)
        if self.session is not None and secrets.compare_digest(digest, self.session.token_sha256):
            return self.session
        row = open_token_book(self.home).by_digest(digest)
        if row is None or not row.active(now_ms()):
            return None
        return row
