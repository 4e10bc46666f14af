"""The MCP tools of one agent attempt: servers started when the step starts, stopped when it ends.

The listing a step saw is what it keeps: the first visit records it in the trace (``mcp_tools_listed``) and a
resumed or forked visit of the same attempt offers the model exactly those tools again, whatever the server lists
now; a difference is recorded (``mcp_tools_changed``) and shown in the step card, never swapped in silently. Each
server tool becomes an ordinary :class:`piw.tools.Tool` named ``SERVER__TOOL``, so calls and results go through the
agent loop and the conversation record like every other tool (``docs/tools-mcp.md``). A server that did not start
is offered as one stand-in tool, ``SERVER__unavailable``, whose every call answers with the reason: the model
learns the tools are missing instead of guessing why.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piw.config.mcp_servers import McpServerConfig
from piw.tools.base import Tool, ToolContext, ToolResult
from piw.toolservers.connection import CallReply, McpConnection, McpFailure
from piw.workflow.tool_refs import McpTools

MAX_RESULT_CHARS = 50_000
"""Characters of one call's result kept for the model (the tail is cut, with a note)."""
_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """The name the model sees: ``SERVER__TOOL``, made safe and at most 64 characters (a digest keeps it unique)."""
    name = f"{server}__{_NAME_OK.sub('_', tool)}"
    if len(name) <= 64 and name == f"{server}__{tool}":
        return name
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{name[:55]}_{digest}"


def unavailable_name(server: str) -> str:
    return f"{server}__unavailable"


def server_listing(
    ref: McpTools, transport: str, tools: Sequence[Mapping[str, Any]] | None, failure: McpFailure | None
) -> dict[str, Any]:
    """One server's entry of ``mcp_tools_listed``: its tools (after ``only``) or why it did not start."""
    entry: dict[str, Any] = {"server": ref.server, "transport": transport}
    if failure is not None or tools is None:
        entry["error"] = failure.message if failure else "not started"
        if failure is not None and failure.stderr_tail:
            entry["stderrTail"] = failure.stderr_tail
        return entry
    kept = [tool for tool in tools if ref.only is None or tool["name"] in ref.only]
    entry["tools"] = [
        {
            "name": tool_name(ref.server, str(tool["name"])),
            "tool": tool["name"],
            "description": tool.get("description", ""),
            "inputSchema": tool.get("inputSchema") or {"type": "object"},
        }
        for tool in kept
    ]
    if ref.only is not None:
        names = {tool["name"] for tool in tools}
        missing = [name for name in ref.only if name not in names]
        if missing:
            entry["missing"] = missing
    return entry


def listing_changes(recorded: Sequence[Mapping[str, Any]], live: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per server whose live listing differs from the recorded one (empty: nothing changed)."""
    now = {entry["server"]: entry for entry in live}
    lines = []
    for before in recorded:
        server = before["server"]
        after = now.get(server, {})
        if "error" in after and "error" not in before:
            lines.append(f"{server}: not available now ({after['error']})")
            continue
        old = {tool["tool"]: tool for tool in before.get("tools", [])}
        new = {tool["tool"]: tool for tool in after.get("tools", [])}
        if "error" in before:
            if new:
                lines.append(f"{server}: available now with {len(new)} tool(s); the step keeps the stand-in")
            continue
        added = sorted(set(new) - set(old))
        removed = sorted(set(old) - set(new))
        changed = sorted(name for name in set(old) & set(new) if _shape(old[name]) != _shape(new[name]))
        parts = [
            f"{label} {', '.join(names)}"
            for label, names in (("added", added), ("removed", removed), ("changed", changed))
            if names
        ]
        if parts:
            lines.append(f"{server}: " + "; ".join(parts))
    return lines


def _shape(tool: Mapping[str, Any]) -> str:
    return json.dumps([tool.get("description"), tool.get("inputSchema")], sort_keys=True, default=str)


def result_text(reply: CallReply) -> str:
    """A call's content blocks as the text the model reads: text as is, other blocks as one-line markers."""
    parts: list[str] = []
    for block in reply.content:
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource":
            resource = block.get("resource") or {}
            parts.append(str(resource.get("text") or f"[resource {resource.get('uri', '')}]"))
        elif kind == "resource_link":
            parts.append(f"[link {block.get('uri', '')}]")
        else:
            parts.append(f"[{kind} {block.get('mimeType', '')}]".replace(" ]", "]"))
    if not parts and reply.structured is not None:
        parts.append(json.dumps(reply.structured, ensure_ascii=False, default=str))
    text = "\n".join(parts) or "(no content)"
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[result cut: {len(text) - MAX_RESULT_CHARS:,} more characters]"
    return text


@dataclass
class StepToolServers:
    """The servers an attempt started and the tools it offers; :meth:`close` stops every server."""

    connections: dict[str, McpConnection] = field(default_factory=dict)
    listing: list[dict[str, Any]] = field(default_factory=list)
    """What the model is offered: the recorded listing on a resumed visit, else the live one."""
    live: list[dict[str, Any]] = field(default_factory=list)
    configs: Mapping[str, McpServerConfig] = field(default_factory=dict)

    def tools(self) -> list[Tool]:
        """Every offered tool as an ordinary piw tool."""
        out: list[Tool] = []
        for entry in self.listing:
            server = entry["server"]
            if "error" in entry:
                out.append(self._stand_in(entry))
                continue
            for tool in entry.get("tools", []):
                out.append(self._tool(server, tool))
        return out

    def _tool(self, server: str, tool: Mapping[str, Any]) -> Tool:
        remote = str(tool["tool"])
        schema = dict(tool.get("inputSchema") or {})
        schema.setdefault("type", "object")
        description = str(tool.get("description") or f"The {remote} tool of MCP server {server}.")

        def execute(call_id: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return self.call(server, remote, args, ctx)

        return Tool(str(tool["name"]), f"[MCP {server}] {description}", schema, execute)

    def _stand_in(self, entry: Mapping[str, Any]) -> Tool:
        server = str(entry["server"])
        failure = McpFailure(str(entry["error"]), str(entry.get("stderrTail") or ""))

        def execute(call_id: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return _failed(server, None, failure)

        description = (
            f"MCP server {server} is unavailable in this step ({failure.message}). "
            "Its tools cannot be used; calling this returns the error."
        )
        return Tool(unavailable_name(server), description, {"type": "object", "properties": {}}, execute)

    def call(self, server: str, tool: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """One ``tools/call``; every failure is an error result naming the server (and its stderr tail)."""
        connection = self.connections.get(server)
        if connection is None:
            return _failed(server, tool, McpFailure(f"MCP server {server!r} is not running in this step."))
        timeout = connection.config.timeout_s
        if ctx.timeout_s is not None:
            timeout = max(0.001, min(timeout, ctx.timeout_s))
        try:
            reply = connection.call(tool, args, timeout, ctx.cancel)
        except McpFailure as failure:
            return _failed(server, tool, failure)
        details: dict[str, Any] = {"mcp": {"server": server, "tool": tool}}
        return ToolResult(result_text(reply), details=details, is_error=reply.is_error)

    def close(self) -> None:
        """Stop every server this attempt started (each in its own process group, for stdio servers)."""
        connections, self.connections = self.connections, {}
        for connection in connections.values():
            connection.close()


def _failed(server: str, tool: str | None, failure: McpFailure) -> ToolResult:
    details: dict[str, Any] = {"mcp": {"server": server, "tool": tool}, "error": failure.message}
    if failure.stderr_tail:
        details["stderrTail"] = failure.stderr_tail
    return ToolResult(failure.describe(), details=details, is_error=True)


def start_servers(
    refs: Sequence[McpTools],
    configs: Mapping[str, McpServerConfig],
    *,
    cwd: Path,
    recorded: Sequence[Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
) -> StepToolServers:
    """Start the servers ``refs`` name (in parallel), list their tools, and choose what the step offers.

    A server missing from ``configs`` is a failed entry like one that did not start (the run-start check makes
    that rare: ``check_servers``).
    """
    servers = StepToolServers(configs=configs)
    for ref in refs:
        config = configs.get(ref.server)
        if config is not None:
            connection = McpConnection(ref.server, config, cwd=cwd, env=env)
            servers.connections[ref.server] = connection
            connection.begin()
    for ref in refs:
        started = servers.connections.get(ref.server)
        if started is None:
            missing = McpFailure(f"config.toml has no [mcp.{ref.server}] table")
            servers.live.append(server_listing(ref, "none", None, missing))
            continue
        try:
            tools = started.wait_ready()
            servers.live.append(server_listing(ref, started.config.transport, tools, None))
        except McpFailure as failure:
            started.close()
            servers.connections.pop(ref.server, None)
            servers.live.append(server_listing(ref, started.config.transport, None, failure))
    servers.listing = [dict(entry) for entry in recorded] if recorded is not None else servers.live
    return servers


def probe_servers(
    configs: Mapping[str, McpServerConfig], *, cwd: Path, env: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Start every configured server (in parallel), list its tools and stop it: what ``piw mcp list`` shows.

    Each entry is ``{name, transport, where, tools: [{name, offeredAs, description}]}``, or with ``error`` (and
    ``stderrTail``) instead of ``tools`` when the server did not start.
    """
    connections = {
        name: McpConnection(name, config, cwd=cwd, env=env) for name, config in sorted(configs.items())
    }
    for connection in connections.values():
        connection.begin()
    out: list[dict[str, Any]] = []
    for name, connection in connections.items():
        entry: dict[str, Any] = {
            "name": name,
            "transport": connection.config.transport,
            "where": connection.config.describe(),
        }
        try:
            tools = connection.wait_ready()
            entry["tools"] = [
                {
                    "name": tool["name"],
                    "offeredAs": tool_name(name, tool["name"]),
                    "description": tool["description"],
                }
                for tool in tools
            ]
        except McpFailure as failure:
            entry["error"] = failure.message
            entry["stderrTail"] = failure.stderr_tail or None
        finally:
            connection.close()
        out.append(entry)
    return out
