"""The tool registry: the names a node's ``tools=(...)`` may list.

Registering a tool only makes it available; a model is offered a tool only while a node lists it, so shipped
tools such as ``bash`` can be registered without being on by default.
"""

from __future__ import annotations

import re
import threading

from piw.errors import DefinitionError
from piw.tools.base import Tool

RESERVED = "workflow"
"""The step-completion tool; the engine alone offers it, so nothing may register or list it."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-compatible and Anthropic servers accept

_lock = threading.Lock()
_tools: dict[str, Tool] = {}


def register(name: str, tool: Tool) -> None:
    """Make ``tool`` available under ``name``; registering a name again replaces it (files get reloaded)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise DefinitionError(f"Tool name {name!r} is invalid; use 1-64 letters, digits, '_' or '-'.")
    if name.casefold() == RESERVED:
        raise DefinitionError(f"The tool name {name!r} is reserved for step completion; choose another name.")
    if not isinstance(tool, Tool):
        raise DefinitionError(f"Tool {name!r} must be a piw.tools.Tool, got {type(tool).__name__}.")
    if tool.name != name:
        raise DefinitionError(f"Tool registered as {name!r} is named {tool.name!r}; the two must be equal.")
    if not isinstance(tool.parameters, dict) or tool.parameters.get("type") != "object":
        raise DefinitionError(f"Tool {name!r} parameters must be a JSON Schema with an object root.")
    if any(key in tool.parameters for key in ("anyOf", "oneOf", "allOf")):
        raise DefinitionError(f"Tool {name!r} parameters must not be a union at the root; servers reject it.")
    if not callable(tool.execute):
        raise DefinitionError(f"Tool {name!r} execute must be callable as execute(call_id, args, ctx).")
    with _lock:
        _tools[name] = tool


def unregister(name: str) -> None:
    """Remove ``name`` if registered; mainly for tests that register temporary tools."""
    with _lock:
        _tools.pop(name, None)


def get(name: str) -> Tool:
    """The tool registered under ``name``; an unknown name is a definition error naming the known ones."""
    with _lock:
        tool = _tools.get(name)
        known = sorted(_tools)
    if tool is None:
        listed = ", ".join(known) or "none"
        raise DefinitionError(
            f"No tool named {name!r} is registered (registered: {listed}); register it with "
            "piw.tools.register(name, tool) before the workflow runs."
        )
    return tool


def registered_names() -> list[str]:
    """Every registered tool name, sorted."""
    with _lock:
        return sorted(_tools)
