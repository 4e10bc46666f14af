"""``mcp("NAME", only=[...])``: an agent step's reference to the tools of a configured MCP server.

A workflow names a server, never how to reach it: ``[mcp.NAME]`` in ``config.toml`` says that, per machine, and
its secrets stay there (``docs/tools-mcp.md``). The reference is plain data, so it goes into the definition
snapshot and ``piw show`` lists it; which tools the server really offers is known only when a step starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from piw.errors import DefinitionError

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


@dataclass(frozen=True)
class McpTools:
    """The tools of the MCP server ``server`` (all of them, or only the names in ``only``)."""

    server: str
    only: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """The snapshot form: ``{"server": NAME}`` plus ``"only"`` when given."""
        data: dict[str, Any] = {"server": self.server}
        if self.only is not None:
            data["only"] = list(self.only)
        return data

    def label(self) -> str:
        """``mcp notes`` or ``mcp notes(search, fetch)``, as ``piw show`` prints it."""
        return f"mcp {self.server}" + ("" if self.only is None else f"({', '.join(self.only)})")


def mcp(server: str, *, only: Sequence[str] | None = None) -> McpTools:
    """The tools of the ``[mcp.SERVER]`` server of ``config.toml``, for ``agent(tools=(...))``.

    ``only`` keeps just those tool names (as the server names them); a name the server does not offer is
    reported in the step card when the step starts.
    """
    if not isinstance(server, str) or not _SERVER_NAME.match(server):
        raise DefinitionError(f"mcp server name {server!r} must be 1-32 letters, digits, '_' or '-'")
    if only is None:
        return McpTools(server)
    if isinstance(only, str) or not all(isinstance(name, str) and name for name in only):
        raise DefinitionError(f"mcp({server!r}, only=...) must be a list of tool names")
    if not only:
        raise DefinitionError(f"mcp({server!r}, only=[]) offers no tool; leave it out instead")
    return McpTools(server, tuple(dict.fromkeys(only)))
