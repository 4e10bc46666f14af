"""What a workflow needs and does, read from its definition: the data behind ``piw show``.

Everything is derived from the loaded definition (the input model's JSON Schema, the author's nodes, edges,
includes and exits) plus two optional files beside the workflow file: ``NAME.input.json`` (an example input) and
``NAME.replies.json`` (scripted replies, which the scripted provider finds on its own). Without an example input
one is built from the schema and kept only if the input model accepts it, so the example command always works.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from piw.errors import PiwError
from piw.workflow.definition import AgentNode, CheckpointNode, Edge, Switch, WorkflowDefinition
from piw.workflow.loader import SUFFIX, LoadedWorkflow, prepare_input
from piw.workflow.tool_refs import McpTools


@dataclass(frozen=True)
class InputField:
    """One input field (nested fields are dotted paths, list items add ``[]``)."""

    path: str
    type: str
    required: bool
    default: Any = None
    has_default: bool = False
    description: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.path, "type": self.type, "required": self.required}
        if self.has_default:
            data["default"] = self.default
        if self.description:
            data["description"] = self.description
        return data


@dataclass(frozen=True)
class GraphLine:
    """One node or include of the author's graph, with where it goes next (``on`` is a switch's path)."""

    id: str
    kind: str
    targets: list[tuple[str | None, str]] = field(default_factory=list)
    on: str | None = None
    exit: str | None = None
    mcp: tuple[McpTools, ...] = ()
    """An agent step's MCP servers (``mcp("NAME")`` in its ``tools``)."""

    @property
    def label(self) -> str:
        """The kind, with an agent step's MCP servers: ``agent · mcp notes(search)``."""
        return " · ".join([self.kind, *(ref.label() for ref in self.mcp)])

    def route_texts(self) -> list[str]:
        texts = [
            f"{self.on} = {when} → {target}" if when is not None else f"→ {target}"
            for when, target in self.targets
        ]
        if self.exit:
            texts.append(f"exit {self.exit}")
        return texts or ["end"]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "type": self.kind}
        if self.on is not None:
            data["switch"] = {"on": self.on, "cases": {when: target for when, target in self.targets}}
        elif self.targets:
            data["next"] = self.targets[0][1]
        if self.exit:
            data["exit"] = self.exit
        if self.mcp:
            data["mcp"] = [ref.to_json() for ref in self.mcp]
        return data


@dataclass(frozen=True)
class Description:
    """Everything ``piw show`` prints."""

    reference: str
    loaded: LoadedWorkflow
    fields: list[InputField]
    schema: dict[str, Any] | None
    graph: list[GraphLine]
    example_input: Any
    example_input_file: Path | None
    replies_file: Path | None
    needs_model: bool

    @property
    def definition(self) -> WorkflowDefinition:
        return self.loaded.definition

    def command(self) -> str:
        """A ``piw run`` command that works as printed (offline when scripted replies ship with the workflow)."""
        parts = ["piw", "run", _shell_word(self.reference)]
        if self.example_input_file is not None:
            parts += ["--input", _shell_word(f"@{self.example_input_file}")]
        elif self.example_input not in (None, {}):
            parts += ["--input", _shell_word(json.dumps(self.example_input, ensure_ascii=False))]
        if self.needs_model and self.replies_file is not None:
            parts += ["--provider", "scripted"]
        return " ".join(parts)


def describe(reference: str, loaded: LoadedWorkflow) -> Description:
    definition = loaded.definition
    model = definition.input
    schema = model.model_json_schema() if isinstance(model, type) and issubclass(model, BaseModel) else None
    fields = input_fields(schema) if schema is not None else []
    stem = loaded.path.name.removesuffix(SUFFIX)
    example_file: Path | None = loaded.path.with_name(f"{stem}.input.json")
    replies = loaded.path.with_name(f"{stem}.replies.json")
    example_input: Any = None
    if example_file is not None and example_file.is_file():
        try:
            example_input = json.loads(example_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            example_file = None
    else:
        example_file = None
    if example_file is None:
        example_input = _accepted(definition, sample_value(schema, schema) if schema else {})
    # Agent nodes (mounted ones included) ask a model; an action or a shell command does not (an action that calls
    # ``ctx.run_agent`` is the exception it cannot see: the run then says which provider is missing).
    needs_model = any(isinstance(gnode.node, AgentNode) for gnode in loaded.graph.nodes.values())
    return Description(
        reference=reference,
        loaded=loaded,
        fields=fields,
        schema=schema,
        graph=graph_lines(definition),
        example_input=example_input,
        example_input_file=example_file,
        replies_file=replies if replies.is_file() else None,
        needs_model=needs_model,
    )


def _accepted(definition: WorkflowDefinition, candidate: Any) -> Any:
    try:
        prepare_input(definition, candidate)
    except PiwError:
        return None
    return candidate


def _shell_word(text: str) -> str:
    safe = all(ch.isalnum() or ch in "@%+=:,./_-" for ch in text)
    return text if safe and text else "'" + text.replace("'", "'\"'\"'") + "'"


# ---- input fields from the JSON Schema --------------------------------------------------------------------


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target: dict[str, Any] = root.get("$defs", {}).get(ref.removeprefix("#/$defs/"), {})
        return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _is_json_value(schema: dict[str, Any]) -> bool:
    return schema.get("$ref") == "#/$defs/JsonValue" or schema == {}


def _non_null(schema: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    options = schema.get("anyOf") or schema.get("oneOf")
    if not options:
        return [schema], False
    kept = [option for option in options if option.get("type") != "null"]
    return kept, len(kept) < len(options)


def _range(low: Any, high: Any, unit: str = "") -> str:
    def number(value: Any) -> str:
        return f"{value:,}" if isinstance(value, int) else str(value)

    suffix = f" {unit}" if unit else ""
    if low is not None and high is not None:
        return f"{number(low)}–{number(high)}{suffix}"
    if high is not None:
        return f"≤ {number(high)}{suffix}"
    if low is not None:
        return f"≥ {number(low)}{suffix}"
    return ""


def type_text(schema: dict[str, Any], root: dict[str, Any]) -> str:
    """A short human type: ``string 1–20,000 chars``, ``integer 1–32``, ``list of object (1–32)``."""
    if _is_json_value(schema):
        return "any JSON"
    options, _ = _non_null(schema)
    if len(options) > 1:
        return " or ".join(type_text(option, root) for option in options)
    item = _resolve(options[0], root)
    if _is_json_value(options[0]):
        return "any JSON"
    if "enum" in item:
        return "one of " + ", ".join(json.dumps(value) for value in item["enum"])
    if "const" in item:
        return json.dumps(item["const"])
    kind = item.get("type", "object" if "properties" in item else "value")
    if kind == "string":
        text = "string"
        limits = _range(item.get("minLength"), item.get("maxLength"), "chars")
        if limits:
            text += f" {limits}"
        if item.get("pattern"):
            text += f" matching {item['pattern']}"
        return text
    if kind in ("integer", "number"):
        limits = _range(item.get("minimum"), item.get("maximum"))
        return f"{kind} {limits}".strip()
    if kind == "array":
        items = _resolve(item.get("items", {}), root)
        inner = "object" if "properties" in items else type_text(item.get("items", {}), root)
        count = _range(item.get("minItems"), item.get("maxItems"), "items")
        return f"list of {inner}" + (f" ({count})" if count else "")
    return str(kind)


def input_fields(root: dict[str, Any]) -> list[InputField]:
    """The fields of an input schema in declaration order, nested objects expanded."""
    out: list[InputField] = []
    _collect(root, root, "", out)
    return out


def _collect(schema: dict[str, Any], root: dict[str, Any], prefix: str, out: list[InputField]) -> None:
    required = set(schema.get("required", []))
    for name, raw in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        options, _ = _non_null(raw)
        resolved = _resolve(options[0], root) if len(options) == 1 else raw
        out.append(
            InputField(
                path=path,
                type=type_text(raw, root),
                required=name in required,
                default=raw.get("default"),
                has_default="default" in raw,
                description=raw.get("description") or resolved.get("description"),
            )
        )
        if "properties" in resolved and not _is_json_value(raw):
            _collect(resolved, root, f"{path}.", out)
        elif resolved.get("type") == "array":
            items = _resolve(resolved.get("items", {}), root)
            if "properties" in items:
                _collect(items, root, f"{path}[].", out)


def sample_value(schema: dict[str, Any], root: dict[str, Any]) -> Any:
    """A small value the schema probably accepts: required fields only, shortest allowed sizes."""
    options, _ = _non_null(schema)
    item = _resolve(options[0], root)
    if _is_json_value(options[0]):
        return "example"
    if "default" in schema:
        return schema["default"]
    if "enum" in item:
        return item["enum"][0]
    if "const" in item:
        return item["const"]
    kind = item.get("type", "object" if "properties" in item else None)
    if kind == "string":
        return "example"[: item.get("maxLength", 7)] or "x"
    if kind in ("integer", "number"):
        return item.get("minimum", 1)
    if kind == "boolean":
        return False
    if kind == "array":
        return [sample_value(item.get("items", {}), root) for _ in range(item.get("minItems", 0))]
    if kind == "object":
        required = item.get("required", [])
        return {
            name: sample_value(sub, root)
            for name, sub in item.get("properties", {}).items()
            if name in required
        }
    return None


# ---- the author's graph ---------------------------------------------------------------------------------


def graph_lines(definition: WorkflowDefinition) -> list[GraphLine]:
    """One line per node and include, in declaration order, with its outgoing route and exit."""
    outgoing = {item.source: item for item in definition.edges}
    exits = {node: name for name, node in definition.exits.items()}
    lines: list[GraphLine] = []
    ids: list[tuple[str, str]] = [(node_id, _node_kind(node)) for node_id, node in definition.nodes.items()]
    ids += [(mount_id, _include_kind(mounted.child)) for mount_id, mounted in definition.includes.items()]
    order = {node_id: index for index, node_id in enumerate([*definition.nodes, *definition.includes])}
    ids.sort(key=lambda pair: (pair[0] != definition.start_at, _first_seen(definition, pair[0], order)))
    for node_id, kind in ids:
        item = outgoing.get(node_id)
        node = definition.nodes.get(node_id)
        servers = node.mcp if isinstance(node, AgentNode) else ()
        if isinstance(item, Switch):
            targets: list[tuple[str | None, str]] = list(item.cases.items())
            lines.append(GraphLine(node_id, kind, targets, item.on, exits.get(node_id), servers))
        else:
            targets = [(None, item.target)] if isinstance(item, Edge) else []
            lines.append(GraphLine(node_id, kind, targets, None, exits.get(node_id), servers))
    return lines


def _first_seen(definition: WorkflowDefinition, node_id: str, order: dict[str, int]) -> int:
    """Breadth-first position from ``start_at``, so the listing reads in the order a run goes."""
    seen = [definition.start_at]
    outgoing = {item.source: item for item in definition.edges}
    index = 0
    while index < len(seen):
        item = outgoing.get(seen[index])
        targets = [item.target] if isinstance(item, Edge) else list(item.cases.values()) if item else []
        for target in targets:
            if target not in seen:
                seen.append(target)
        index += 1
    return seen.index(node_id) if node_id in seen else len(seen) + order.get(node_id, 0)


def _node_kind(node: Any) -> str:
    if isinstance(node, CheckpointNode) and node.human_decision is not None:
        return "human_decision"
    if isinstance(node, AgentNode):
        return "agent (reply)" if node.completion == "assistant" else "agent"
    return str(node.node_type)


def _include_kind(child: WorkflowDefinition | str) -> str:
    """``include NAME (revision N)``; a built-in id not mounted yet (outside the loader) shows as itself."""
    if isinstance(child, str):
        return f"include {child}"
    revision = f" (revision {child.revision})" if child.revision is not None else ""
    return f"include {child.name}{revision}"
