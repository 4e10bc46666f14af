"""The tool shape shared by the agent loop, the registry and every shipped tool.

A tool's JSON Schema is the single source of truth for its arguments: :func:`check_args` enforces the small
subset the shipped tools use, so what the model is told and what is enforced cannot drift apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Execute = Callable[[str, dict[str, Any], "ToolContext"], "ToolResult"]
ToolEffect = Literal["retry", "once"]
"""``execute(call_id, args, ctx)``: runs one tool call and returns its result."""


@dataclass(frozen=True)
class ToolResult:
    """What a tool call returns to the model; ``terminate`` asks the loop to stop after this batch."""

    content: str
    details: dict[str, Any] | None = None
    is_error: bool = False
    terminate: bool = False


@dataclass(frozen=True)
class ToolContext:
    """Where and how long a call may run: every path is scoped to ``cwd``; ``cancel`` aborts long calls."""

    cwd: Path
    timeout_s: float | None
    cancel: threading.Event
    env_allow: tuple[str, ...] = ()
    """Extra environment variable names tool processes may see (``[agent] tool_env``; see ``piw.tools.environment``)."""
    protected: tuple[Path, ...] = ()
    """Paths no file tool may read or list even under ``cwd``: ``PIW_HOME`` (run bundles) and the config file."""


@dataclass(frozen=True)
class Tool:
    """A tool offered to a model: name, description, object-root JSON Schema and the function that runs it."""

    name: str
    description: str
    parameters: dict[str, Any]
    execute: Execute
    effect: ToolEffect = "once"
    """What a resume may do with a call of it that piw was interrupted in (``docs/effects.md``, "Tool calls"):
    ``once`` (the default, for any tool that may change something: ``bash``, an MCP tool) records the call's start
    durably first, and a call interrupted mid-flight is answered "interrupted, outcome unknown" instead of run
    again; ``retry`` (a read-only tool) is answered "did not finish, call it again if you still need it"."""


class ToolRefused(Exception):
    """Raised inside a shipped tool for bad input; :func:`guarded` turns it into an ``is_error`` result."""


def error_result(message: str, **details: Any) -> ToolResult:
    """An ``is_error`` result; the message is what the model reads, so it names the reason and the fix."""
    return ToolResult(content=message, details=details or None, is_error=True)


def check_args(args: object, schema: Mapping[str, Any]) -> str | None:
    """Why ``args`` do not match ``schema``, or ``None`` when they do.

    Supports what the shipped tools declare: an object root with ``properties``, ``required`` and
    ``additionalProperties: false``, and properties of type string (``minLength``), integer (``minimum``) or
    boolean. Unknown keys are refused, because a model that misspells ``offset`` should learn it did, not have
    the argument silently ignored.
    """
    if not isinstance(args, dict):
        return f"arguments must be a JSON object, got {type(args).__name__}"
    properties: Mapping[str, Any] = schema.get("properties", {})
    unknown = sorted(str(key) for key in args if key not in properties)
    if unknown and schema.get("additionalProperties") is False:
        return f"unknown argument(s) {', '.join(unknown)}; allowed: {', '.join(properties)}"
    missing = [key for key in schema.get("required", ()) if key not in args]
    if missing:
        return f"missing required argument(s) {', '.join(missing)}"
    for key, value in args.items():
        problem = _check_value(value, properties.get(key, {}))
        if problem is not None:
            return f"argument {key!r} {problem}"
    return None


def _check_value(value: object, prop: Mapping[str, Any]) -> str | None:
    kind = prop.get("type")
    if kind == "string":
        if not isinstance(value, str):
            return "must be a string"
        if len(value) < prop.get("minLength", 0):
            return "must not be empty"
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if "minimum" in prop and value < prop["minimum"]:
            return f"must be at least {prop['minimum']}"
    elif kind == "boolean" and not isinstance(value, bool):
        return "must be true or false"
    return None


def guarded(name: str, parameters: dict[str, Any], run: Execute) -> Execute:
    """Wrap ``run`` so bad arguments, refusals and OS errors become error results instead of exceptions.

    Bugs (any other exception) still raise: the agent loop reports them as error results too, but they should
    be visible as bugs in tests rather than look like the model's fault.
    """

    def execute(call_id: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        problem = check_args(args, parameters)
        if problem is not None:
            return error_result(f"Invalid {name} arguments: {problem}.")
        try:
            return run(call_id, args, ctx)
        except ToolRefused as exc:
            return error_result(f"{name}: {exc}")
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return error_result(f"{name}: {reason}.")

    return execute


def guarded_tool(
    name: str, description: str, parameters: dict[str, Any], run: Execute, effect: ToolEffect = "once"
) -> Tool:
    """A shipped tool: its arguments are checked against ``parameters`` and its refusals answer as errors."""
    return Tool(name, description, parameters, guarded(name, parameters, run), effect)


def listing(lines: list[str], empty: str, cut: str | None, **details: Any) -> ToolResult:
    """One line per item, or ``empty`` when there is none.

    ``cut`` is the note that says where a capped list stopped and how to narrow it, shown after the last line;
    ``details`` then also say whether the list was ``truncated``.
    """
    if not lines:
        return ToolResult(content=empty, details=details)
    content = "\n".join(lines if cut is None else [*lines, cut])
    return ToolResult(content=content, details={**details, "truncated": cut is not None})


def object_schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object-root schema that refuses unknown keys, the only shape tools may declare."""
    schema: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema
