"""``[mcp.NAME]`` tables of ``config.toml``: the MCP tool servers agent steps may use (``docs/tools-mcp.md``).

A server is either a command piw starts and talks to over stdio (``command = ["…", "…"]``, optional ``env``,
``cwd``) or a streamable-HTTP endpoint (``url``, optional ``headers``). A value of ``env`` or ``headers`` may be
a ``$NAME`` reference (the whole value), read from piw's environment when the server starts, like provider keys.
Referenced values, and literal values under a name that looks secret (``…KEY``, ``…TOKEN``, ``Authorization``),
are secrets (:func:`piw.redaction.mcp_secrets`), so they never reach a trace, a log or ``--json``. This
module imports neither the SDK nor the tools: ``config.toml`` is read by almost every command.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from piw.env_refs import resolve_value

DEFAULT_CALL_TIMEOUT_S = 60.0
"""Seconds one tool call may take unless the table sets ``timeout_s`` (the step's own deadline still applies)."""
DEFAULT_START_TIMEOUT_S = 20.0
"""Seconds a server has to start and answer ``initialize`` and ``tools/list``."""

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class McpServerConfig(BaseModel):
    """One ``[mcp.NAME]`` table: a stdio ``command`` or a streamable-HTTP ``url``, never both."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: list[str] | None = Field(default=None, min_length=1)
    """The program and its arguments (no shell); started in its own process group."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set for the command on top of a small safe base (``PATH``, ``HOME``, …); ``$NAME`` reads piw's."""
    cwd: str | None = None
    """Working directory of the command (default: the run's)."""
    url: str | None = None
    """A streamable-HTTP endpoint, such as ``http://127.0.0.1:8931/mcp``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent with every request; ``Authorization = "$MCP_TOKEN"`` reads the whole value from piw's."""
    timeout_s: float = Field(default=DEFAULT_CALL_TIMEOUT_S, gt=0, allow_inf_nan=False)
    start_timeout_s: float = Field(default=DEFAULT_START_TIMEOUT_S, gt=0, allow_inf_nan=False)

    @field_validator("command")
    @classmethod
    def _nonempty_program(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value[0].strip():
            raise ValueError("the first item of command is the program to run and must not be empty")
        return value

    @field_validator("env")
    @classmethod
    def _variable_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _VARIABLE.match(name):
                raise ValueError(f"env key {name!r} is not an environment variable name")
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set either command (a stdio server) or url (a streamable-HTTP server)")
        if self.url is not None and (self.env or self.cwd):
            raise ValueError("env and cwd are for command servers; an HTTP server takes headers")
        if self.command is not None and self.headers:
            raise ValueError("headers are for url servers; a command server takes env")
        return self

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    def describe(self) -> str:
        """Where the server is, for listings: the command or the URL (never a value of ``env`` or ``headers``)."""
        return " ".join(self.command) if self.command is not None else str(self.url)

    def resolved_env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``env`` with ``$NAME`` references read (``NeedsKey`` when one is unset)."""
        return {name: resolve_value(value, env) for name, value in self.env.items()}

    def resolved_headers(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``headers`` with ``$NAME`` references read (``NeedsKey`` when one is unset)."""
        return {name: resolve_value(value, env) for name, value in self.headers.items()}


def check_server_names(value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
    """Server names become part of tool names the model sees, so they are short and plain."""
    for name in value:
        if not _SERVER_NAME.match(name):
            raise ValueError(f"MCP server name {name!r} may hold only 1-32 letters, digits, '_' and '-'")
    return value


def check_servers(
    named: Mapping[str, Sequence[str]], configured: Mapping[str, McpServerConfig], backend: str = "piw"
) -> None:
    """Refuse, before any run exists, a step that names an unconfigured server or a machine without the SDK.

    ``named`` maps a node id to the servers its ``mcp(...)`` references name. The ``pi-rpc`` backend runs the
    model's tools inside Pi, which cannot reach piw's MCP connections, so it is refused too.
    """
    from piw.errors import ToolServerError

    if backend != "piw" and any(named.values()):
        raise ToolServerError(
            f"MCP tools need the piw agent backend; [agent] backend = {backend!r} cannot offer them "
            "(docs/tools-mcp.md)."
        )

    for node_id, servers in named.items():
        for server in servers:
            if server not in configured:
                raise ToolServerError(
                    f"Step {node_id} uses mcp({server!r}) but config.toml has no [mcp.{server}] table; add one "
                    'with command = [...] or url = "..." (docs/tools-mcp.md).'
                )
    if any(named.values()) and importlib.util.find_spec("mcp") is None:
        raise ToolServerError("MCP tools need the mcp SDK: pip install 'piw[mcp]'.")
