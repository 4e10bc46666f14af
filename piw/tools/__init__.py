"""Tools an agent step may use, by name: the registry and the tools piw ships.

Shipped: ``read``, ``ls``, ``find`` and ``grep`` (read-only, scoped to the run's working directory) and
``bash`` (opt-in: it can change anything, so a node must name it). A model sees a tool only when its node
lists it in ``tools=(...)``; none of these tools can complete a step, only the engine's ``workflow`` tool can.
"""

from __future__ import annotations

from piw.tools.base import Execute, Tool, ToolContext, ToolResult
from piw.tools.bash import BASH
from piw.tools.environment import allow_env
from piw.tools.files import LS, READ
from piw.tools.registry import RESERVED, get, register, registered_names, unregister
from piw.tools.search import FIND, GREP

SHIPPED: tuple[Tool, ...] = (READ, LS, FIND, GREP, BASH)
"""The tools piw ships, registered on import."""

for _tool in SHIPPED:
    register(_tool.name, _tool)

__all__ = [
    "BASH",
    "FIND",
    "GREP",
    "LS",
    "READ",
    "RESERVED",
    "SHIPPED",
    "Execute",
    "Tool",
    "ToolContext",
    "ToolResult",
    "allow_env",
    "get",
    "register",
    "registered_names",
    "unregister",
]
