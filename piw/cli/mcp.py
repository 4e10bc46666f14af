"""``piw mcp list``: the MCP tool servers of ``config.toml`` and the tools each offers (``docs/cli.md``).

Each server is started (in parallel), asked for its tools and stopped, exactly as an agent step would; a server
that does not start shows why, with the tail of its stderr, and the command exits 1. Values of ``env`` and
``headers`` are never printed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from piw.cli.app import app
from piw.errors import UsageError
from piw.terminal import json_text, sanitize_terminal_text


def _say(line: str) -> None:
    sys.stdout.write(sanitize_terminal_text(line) + "\n")


@app.command()
def mcp(
    action: Annotated[str, typer.Argument(help="list.", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> int:
    """Show the configured MCP servers and their tools: 'piw mcp list' starts each server, lists it, stops it."""
    if action != "list":
        raise UsageError(f"Unknown 'piw mcp' action {action!r}; use 'piw mcp list'.")
    from piw.config.mcp_servers import check_servers
    from piw.config.path import config_path
    from piw.config.settings import load_config
    from piw.redaction import redactor_for
    from piw.store.home import piw_home

    home = piw_home()
    config = load_config(home)
    if not config.mcp:
        if as_json:
            sys.stdout.write("[]\n")
        else:
            _say(
                f"No MCP servers configured in {config_path(home)}; add an [mcp.NAME] table (docs/tools-mcp.md)."
            )
        return 0
    check_servers({"piw mcp list": list(config.mcp)}, config.mcp)  # the SDK is installed
    from piw.toolservers.toolset import probe_servers

    servers: list[dict[str, Any]] = redactor_for(home).value(probe_servers(config.mcp, cwd=Path.cwd()))
    failed = any("error" in server for server in servers)
    if as_json:
        sys.stdout.write(json_text(servers) + "\n")
        return 1 if failed else 0
    for server in servers:
        _print_server(server)
    return 1 if failed else 0


def _print_server(server: dict[str, Any]) -> None:
    _say(f"{server['name']}  {server['transport']}  {server['where']}")
    if "error" in server:
        _say(f"  failed: {server['error']}")
        for line in (server.get("stderrTail") or "").strip().splitlines()[-5:]:
            _say(f"  | {line}")
        return
    if not server["tools"]:
        _say("  (no tools)")
    width = min(max((len(tool["offeredAs"]) for tool in server["tools"]), default=0) + 2, 40)
    for tool in server["tools"]:
        description = " ".join(str(tool["description"]).split())
        _say(f"  {tool['offeredAs'].ljust(width)}{description[:100]}")
