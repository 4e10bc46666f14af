"""MCP tool servers in agent steps (``docs/tools-mcp.md``): their config, connections and per-step tool sets.

Only :mod:`piw.config.mcp_servers` is imported by every command; the SDK (``piw[mcp]``) is imported when a step
names a server, or by ``piw mcp list``.
"""
