"""An agent attempt's MCP servers: started with the step, listed into the trace once, stopped with the step.

The first visit of an attempt records what the servers offered (``mcp_tools_listed``, fsync'd before the step's
prompt), and the fold keeps it with the attempt (``CurrentAttempt.mcp_tools``); a resumed or forked visit of the
same attempt offers the model those recorded tools again and records any difference it sees now
(``mcp_tools_changed``), which the step card shows (``docs/tools-mcp.md``). A ``ctx.run_agent`` child records
nothing in the trace (its prompts live only in the conversation), so it lists afresh on every visit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from piw.agent_steps.events import ToolServersNotice
from piw.config.mcp_servers import McpServerConfig
from piw.run.executors import Attempt
from piw.toolservers.toolset import StepToolServers, listing_changes, start_servers
from piw.workflow.definition import AgentNode


def open_tool_servers(
    attempt: Attempt,
    node: AgentNode,
    configs: Mapping[str, McpServerConfig],
    cwd: Path,
    *,
    durable: bool,
    emit: Callable[[Any], None],
) -> StepToolServers:
    """Start ``node``'s servers for ``attempt`` and record (or compare with) the listing in the trace."""
    current = attempt.writer.state.current
    recorded = None
    if durable and current is not None and current.attempt_id == attempt.attempt_id:
        recorded = current.mcp_tools
    node_id, attempt_id = attempt.node_id, attempt.attempt_id
    servers = start_servers(node.mcp, configs, cwd=cwd, recorded=recorded)
    if durable and recorded is None:
        attempt.writer.append(
            "agent",
            "mcp_tools_listed",
            {"servers": servers.live},
            node_id=node_id,
            attempt_id=attempt_id,
            sync=True,
        )
    elif recorded is not None:
        changes = listing_changes(recorded, servers.live)
        if changes:
            payload = {"changes": changes, "servers": servers.live}
            attempt.writer.append(
                "agent", "mcp_tools_changed", payload, node_id=node_id, attempt_id=attempt_id, sync=True
            )
            emit(
                ToolServersNotice(
                    text="MCP tools changed since this step started (it keeps the tools it started with): "
                    + " · ".join(changes)
                )
            )
    for entry in servers.listing:
        if "error" in entry:
            emit(ToolServersNotice(text=f"MCP server {entry['server']} unavailable: {entry['error']}"))
        for name in entry.get("missing", ()):
            emit(
                ToolServersNotice(text=f"MCP server {entry['server']} has no tool {name!r} (named in only=)")
            )
    return servers
