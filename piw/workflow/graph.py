"""Run-start validation, include flattening and the definition snapshot.

Includes are flattened into one graph whose node ids are mount paths (``ready_summary/summarize``), so the engine,
the trace and every view see one flat set of nodes. The JSON snapshot written to ``workflow.json`` has no functions,
which is why viewers never import user code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from piw.errors import DefinitionError
from piw.wire import DEFINITION_SNAPSHOT_SCHEMA, digest
from piw.workflow.definition import (
    ActionNode,
    AgentNode,
    AssistantMessage,
    CheckpointNode,
    Edge,
    Node,
    Switch,
    WorkflowDefinition,
)
from piw.workflow.schemas import json_schema


@dataclass(frozen=True)
class GraphNode:
    """A node of the flat graph."""

    id: str
    local_id: str
    mount_path: tuple[str, ...]
    node: Node


@dataclass(frozen=True)
class Mount:
    """One mounted include: where it starts and which flat node ids leave it through which exit."""

    path: str
    definition: WorkflowDefinition
    input: Any
    start: str
    exits: dict[str, str]
    """exit name → flat id of the node (or nested mount) that leaves through it"""


@dataclass(frozen=True)
class FlatGraph:
    """The flattened, validated graph the engine runs."""

    definition: WorkflowDefinition
    start_at: str
    nodes: dict[str, GraphNode]
    edges: dict[str, Edge | Switch]
    mounts: dict[str, Mount] = field(default_factory=dict)

    def mount_of(self, node_id: str) -> Mount | None:
        """The innermost mount containing a flat node (or nested mount) id."""
        parent = node_id.rpartition("/")[0]
        return self.mounts.get(parent) if parent else None

    def exit_name(self, node_id: str) -> str | None:
        """The exit name through which ``node_id`` leaves its enclosing mount, if it is an exit."""
        mount = self.mount_of(node_id)
        if mount is None:
            return None
        for name, source in mount.exits.items():
            if source == node_id:
                return name
        return None


def _prefix(path: str, local: str) -> str:
    return f"{path}/{local}" if path else local


def flatten(definition: WorkflowDefinition, tools_known: Callable[[str], bool] | None = None) -> FlatGraph:
    """Validate the graph (run-start pass) and flatten includes; errors name the workflow, node and reason."""
    nodes: dict[str, GraphNode] = {}
    edges: dict[str, Edge | Switch] = {}
    mounts: dict[str, Mount] = {}
    _flatten_into(definition, "", (), nodes, edges, mounts, (definition,), tools_known)
    graph = FlatGraph(definition, _entry(definition, "", mounts), nodes, edges, mounts)
    _check_reachable(graph)
    return graph


def _entry(definition: WorkflowDefinition, path: str, mounts: dict[str, Mount]) -> str:
    target = _prefix(path, definition.start_at)
    return mounts[target].start if target in mounts else target


def _flatten_into(
    definition: WorkflowDefinition,
    path: str,
    mount_path: tuple[str, ...],
    nodes: dict[str, GraphNode],
    edges: dict[str, Edge | Switch],
    mounts: dict[str, Mount],
    chain: tuple[WorkflowDefinition, ...],
    tools_known: Callable[[str], bool] | None,
) -> None:
    where = f"workflow {definition.name!r}"
    local_ids = set(definition.nodes) | set(definition.includes)
    if definition.start_at not in local_ids:
        raise DefinitionError(f"{where}: start_at {definition.start_at!r} is not a node")
    for local_id, node in definition.nodes.items():
        if isinstance(node, AgentNode) and tools_known is not None:
            for tool in node.tools:
                if not tools_known(tool):
                    raise DefinitionError(f"{where}: node {local_id!r} lists unknown tool {tool!r}")
        flat_id = _prefix(path, local_id)
        nodes[flat_id] = GraphNode(flat_id, local_id, mount_path, node)
    for mount_id, mounted in definition.includes.items():
        child = mounted.child
        if isinstance(child, str):
            raise DefinitionError(
                f"{where}: include {mount_id!r} names the built-in {child!r}, which only a workflow file "
                "loaded by piw can mount"
            )
        # By identity: two different workflows may share a name; only mounting an ancestor again is a cycle.
        if any(child is ancestor for ancestor in chain):
            cycle = " → ".join(item.name for item in (*chain, child))
            raise DefinitionError(f"{where}: include {mount_id!r} forms an include cycle ({cycle})")
        child_path = _prefix(path, mount_id)
        _flatten_into(
            child, child_path, (*mount_path, mount_id), nodes, edges, mounts, (*chain, child), tools_known
        )
        exits = dict(child.exits) or _implicit_exits(child)
        for exit_name, local in exits.items():
            if local not in child.nodes and local not in child.includes:
                raise DefinitionError(
                    f"workflow {child.name!r}: exit {exit_name!r} names unknown node {local!r}"
                )
        mounts[child_path] = Mount(
            path=child_path,
            definition=child,
            input=mounted.input,
            start=_entry(child, child_path, mounts),
            exits={name: _prefix(child_path, local) for name, local in exits.items()},
        )
    for item in definition.edges:
        _flatten_edge(item, definition, path, local_ids, edges)


def _flatten_edge(
    item: Edge | Switch,
    definition: WorkflowDefinition,
    path: str,
    local_ids: set[str],
    edges: dict[str, Edge | Switch],
) -> None:
    """Add one of ``definition``'s edges (or switches) to the flat graph, checking what it joins."""
    where = f"workflow {definition.name!r}"
    if item.source not in local_ids:
        raise DefinitionError(f"{where}: edge from unknown node {item.source!r}")
    flat_source = _prefix(path, item.source)
    if flat_source in edges:
        raise DefinitionError(
            f"{where}: node {item.source!r} has more than one outgoing edge; use switch(...)"
        )
    targets = [item.target] if isinstance(item, Edge) else list(item.cases.values())
    for target in targets:
        if target not in local_ids:
            raise DefinitionError(f"{where}: edge from {item.source!r} targets unknown node {target!r}")
    if isinstance(item, Switch) and item.on == "$exit" and item.source not in definition.includes:
        raise DefinitionError(f"{where}: switch on '$exit' needs an include as source, not {item.source!r}")
    if isinstance(item, Edge):
        edges[flat_source] = Edge(flat_source, _prefix(path, item.target))
    else:
        cases = {value: _prefix(path, target) for value, target in item.cases.items()}
        edges[flat_source] = Switch(flat_source, item.on, cases)


def _implicit_exits(child: WorkflowDefinition) -> dict[str, str]:
    """Without declared exits, a child leaves through its terminal node (``done``), or one exit per terminal."""
    terminal = [
        local for local in [*child.nodes, *child.includes] if not any(e.source == local for e in child.edges)
    ]
    return {"done": terminal[0]} if len(terminal) == 1 else {local: local for local in terminal}


def successors(graph: FlatGraph, node_id: str) -> list[str]:
    """Flat ids reachable in one routing step from ``node_id`` (mount targets resolve to their start node)."""
    out: list[str] = []
    item = graph.edges.get(node_id)
    if item is not None:
        targets = [item.target] if isinstance(item, Edge) else list(item.cases.values())
        out.extend(graph.mounts[t].start if t in graph.mounts else t for t in targets)
    elif (mount := graph.mount_of(node_id)) is not None and node_id in mount.exits.values():
        out.extend(successors(graph, mount.path))
    return out


def _check_reachable(graph: FlatGraph) -> None:
    seen = {graph.start_at}
    todo = [graph.start_at]
    while todo:
        current = todo.pop()
        for nxt in successors(graph, current):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
        mount = graph.mounts.get(current)
        if mount is not None:
            todo.append(mount.start)
    for mount in graph.mounts.values():
        for source in mount.exits.values():
            if source in graph.mounts and source in seen:
                for nxt in successors(graph, mount.path):
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
    unreachable = sorted(set(graph.nodes) - seen)
    if unreachable:
        node = graph.nodes[unreachable[0]]
        mount = graph.mount_of(node.id)
        name = mount.definition.name if mount is not None else graph.definition.name
        raise DefinitionError(f"workflow {name!r}: node {node.local_id!r} is unreachable from start_at")


# ---- snapshot --------------------------------------------------------------------------------------------


def expected_output_snapshot(expected: Any) -> Any:
    """The snapshot form of ``expected_output``: a string, a JSON schema or the assistant-message marker."""
    if isinstance(expected, AssistantMessage):
        marker: dict[str, Any] = {"kind": "assistant-message"}
        if expected.max_chars is not None:
            marker["maxChars"] = expected.max_chars
        return marker
    if isinstance(expected, type) and issubclass(expected, BaseModel):
        return {"kind": "json-schema", "schema": json_schema(expected)}
    return expected


def _timeout_ms(timeout_s: Any) -> int | None:
    if timeout_s is None or callable(timeout_s):
        return None
    return int(timeout_s * 1000)


def _node_snapshot(graph: FlatGraph, gnode: GraphNode) -> dict[str, Any]:
    node = gnode.node
    data: dict[str, Any] = {"nodeType": node.node_type}
    if isinstance(node, AgentNode | ActionNode):
        data["timeoutMs"] = _timeout_ms(node.timeout_s)
    detail = getattr(node, "status_detail", None)
    if detail:
        data["statusDetail"] = detail
    if isinstance(node, AgentNode):
        data.update(_agent_snapshot(node))
    if isinstance(node, ActionNode):
        execution: dict[str, Any] = {"kind": "shell" if node.shell else "function"}
        if node.effect:
            execution["effect"] = node.effect
        data["actionExecution"] = execution
    if isinstance(node, CheckpointNode) and node.human_decision is not None:
        data["humanDecision"] = node.human_decision.snapshot()
    if isinstance(node, CheckpointNode) and node.answer is not None:
        data["answer"] = {"kind": "json-schema", "schema": node.answer.model_json_schema()}
    if gnode.mount_path:
        data["mountPath"] = list(gnode.mount_path)
        data["localNodeId"] = gnode.local_id
    for mount in graph.mounts.values():
        if mount.start == gnode.id:
            data["includeTransition"] = {"enters": mount.path}
    return data


def _agent_snapshot(node: AgentNode) -> dict[str, Any]:
    """What an agent node's snapshot adds: its expected output, tools, updates, context and token limit."""
    data: dict[str, Any] = {}
    expected = expected_output_snapshot(node.expected_output)
    if expected is not None:
        data["expectedOutput"] = expected
    if node.tools:
        data["tools"] = list(node.tools)
    if node.mcp:
        data["mcp"] = [ref.to_json() for ref in node.mcp]
    if node.updates:
        data["updates"] = True
    if node.context != "run":
        data["context"] = node.context
    if node.max_output_tokens is not None:
        data["maxOutputTokens"] = node.max_output_tokens
    return data


def _edge_snapshots(graph: FlatGraph) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def sources_of(source: str) -> list[tuple[str, str | None]]:
        mount = graph.mounts.get(source)
        if mount is None:
            return [(source, None)]
        found: list[tuple[str, str | None]] = []
        for exit_name, exit_source in mount.exits.items():
            found.extend((flat, name or exit_name) for flat, name in sources_of(exit_source))
        return found

    def target_of(target: str) -> str:
        return graph.mounts[target].start if target in graph.mounts else target

    for source, item in graph.edges.items():
        for flat_source, exit_name in sources_of(source):
            if isinstance(item, Edge):
                row: dict[str, Any] = {"from": flat_source, "to": target_of(item.target)}
                if exit_name and source in graph.mounts:
                    row["exit"] = exit_name
                out.append(row)
                continue
            for value, target in item.cases.items():
                if item.on == "$exit" and exit_name is not None and value != exit_name:
                    continue
                row = {"from": flat_source, "to": target_of(target), "on": item.on, "when": value}
                out.append(row)
    return out


def snapshot(graph: FlatGraph) -> dict[str, Any]:
    """The ``workflow.json`` definition snapshot (no functions; stable across loads of the same source)."""
    definition = graph.definition
    data: dict[str, Any] = {"schema": DEFINITION_SNAPSHOT_SCHEMA, "name": definition.name}
    if definition.contract_id:
        data["contractId"] = definition.contract_id
    if definition.revision is not None:
        data["revision"] = definition.revision
    data["startAt"] = graph.start_at
    data["maxSteps"] = definition.max_steps
    if definition.budget is not None:
        data["budget"] = definition.budget.to_wire()
    data["nodes"] = {node_id: _node_snapshot(graph, gnode) for node_id, gnode in graph.nodes.items()}
    data["edges"] = _edge_snapshots(graph)
    if graph.mounts:
        data["composition"] = {
            "mounts": {
                path: {"workflowName": mount.definition.name, "startAt": mount.start, "exits": mount.exits}
                for path, mount in sorted(graph.mounts.items())
            }
        }
    json.dumps(data, allow_nan=False)
    return data


def definition_digest(snapshot_data: dict[str, Any]) -> str:
    """``sha256:`` digest of the canonical snapshot."""
    return digest(snapshot_data)
