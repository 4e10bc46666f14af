"""``piw tokens create|list|revoke``: the API tokens of ``piw serve`` (``docs/serve.md``, "Tokens").

A token is printed once, by ``create``; the run database keeps only its SHA-256. ``list`` shows names, scopes and
expiry, never a secret.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home
from piw.errors import UsageError
from piw.terminal import json_text, safe_text

ACTIONS = ("create", "list", "revoke")


def _when(ms: int | None) -> str:
    if ms is None:
        return "never"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


@app.command()
def tokens(
    action: Annotated[str, typer.Argument(help="create, list or revoke.", show_default=False)],
    name: Annotated[str | None, typer.Argument(help="The token's name (create, revoke).")] = None,
    scope: Annotated[
        str, typer.Option("--scope", help="create: read, answer (also answers gates) or operate (also acts).")
    ] = "read",
    expires: Annotated[
        str | None, typer.Option("--expires", help="create: lifetime such as 90m, 12h, 30d (default: none).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    database: DatabaseOption = None,
) -> int:
    """Create, list or revoke the API tokens of 'piw serve' (a token is shown once, only its hash is kept)."""
    from piw.store.db.database import now_ms
    from piw.store.db.tokens import open_token_book
    from piw.web.access import create_token, revoke_token

    if action not in ACTIONS:
        raise UsageError(f"Unknown action {action!r}; use one of: {', '.join(ACTIONS)}.")
    if action != "list" and not name:
        raise UsageError(f"'piw tokens {action}' needs the token's NAME.")
    home = command_home(database)
    console = make_console()
    if action == "create":
        assert name is not None
        token, row = create_token(home, name, scope, expires)
        if as_json:
            sys.stdout.write(json_text({**row.to_json(now_ms()), "token": token}) + "\n")
            return 0
        console.print(
            f"Created token {safe_text(name)} (scope {row.scope}, expires {_when(row.expires_at)}). "
            "It is shown only now; send it as 'Authorization: Bearer TOKEN':",
            soft_wrap=True,
        )
        sys.stdout.write(token + "\n")
        return 0
    if action == "revoke":
        assert name is not None
        revoke_token(home, name)
        console.print(f"Revoked token {safe_text(name)}; it is refused from now on.", soft_wrap=True)
        return 0
    now = now_ms()
    rows = open_token_book(home).all()
    if as_json:
        sys.stdout.write(json_text([row.to_json(now) for row in rows]) + "\n")
        return 0
    if not rows:
        console.print("No API tokens. Create one with 'piw tokens create NAME --scope read'.")
        return 0
    for row in rows:
        state = row.to_json(now)["state"]
        console.print(
            f"{safe_text(row.name)}  {row.scope}  {state}  created {_when(row.created_at)}  "
            f"expires {_when(row.expires_at)}",
            soft_wrap=True,
        )
    return 0
