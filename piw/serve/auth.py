"""Bearer tokens on every route, checked by scope (``docs/serve.md``, "Tokens").

``Authorization: Bearer TOKEN`` is looked up by its digest (``piw.web.access``). Every failure (no header, another
scheme, an unknown, expired or revoked token) is 401 with the same line; a client address with too many recent
failures gets 429 whatever it sends. A valid token whose scope does not allow the route is 403. The token itself
is never logged, echoed or stored; the route receives the token's row, whose name becomes ``answered_by``.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Depends, HTTPException, Request

from piw.store.db.tokens import Scope, TokenRow
from piw.web.access import AUTH_FAILED, RATE_LIMITED, Authenticator, allows


def authenticator(request: Request) -> Authenticator:
    found = request.app.state.authenticator
    assert isinstance(found, Authenticator)
    return found


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization") or ""
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def principal(request: Request, needed: Scope) -> TokenRow:
    """The token row for this request if it may do what needs ``needed``; 401/403/429 otherwise."""
    auth = authenticator(request)
    client = request.client.host if request.client else "?"
    if auth.limiter.blocked(client):
        raise HTTPException(429, RATE_LIMITED, headers={"Retry-After": str(int(auth.limiter.window_s))})
    row = auth.lookup(bearer(request))
    if row is None:
        auth.limiter.failed(client)
        raise HTTPException(401, AUTH_FAILED, headers={"WWW-Authenticate": "Bearer"})
    if not allows(row.scope, needed):
        raise HTTPException(
            403, f"Token {row.name!r} has scope {row.scope}; this needs {needed} ('piw tokens create')."
        )
    return row


def needs(scope: Scope) -> Callable[[Request], TokenRow]:
    """A route dependency: the request's token row, of scope ``scope`` or above."""

    def dependency(request: Request) -> TokenRow:
        return principal(request, scope)

    dependency.__name__ = f"needs_{scope}"
    return dependency


Reader = Depends(needs("read"))
Answerer = Depends(needs("answer"))
Operator = Depends(needs("operate"))
