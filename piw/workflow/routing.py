"""Routing: where a run goes after a node (or an include) finishes.

A decision is computed without writing anything, so resume can tell whether routing from the last finished
attempt ends the run (then only the terminal event is written) before it appends ``run_resumed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from piw.store.fold import RunState
from piw.workflow.definition import Edge
from piw.workflow.graph import FlatGraph, Mount

_OUTCOME_TO_RUN_EVENT = {"timed_out": "run_timed_out", "cancelled": "run_cancelled"}


@dataclass(frozen=True)
class Exit:
    """Leaving ``mount`` through ``name`` with ``output``."""

    mount: Mount
    name: str
    output: Any


@dataclass(frozen=True)
class Decision:
    """Include exits to record, then either a target (node or mount id) or a terminal run event."""

    exits: list[Exit] = field(default_factory=list)
    target: str | None = None
    terminal: tuple[str, dict[str, Any]] | None = None


def read_path(path: str, outcome: str, output: Any, exit_name: str | None) -> Any:
    """Evaluate a switch path against a finished node."""
    if path == "$result.outcome":
        return outcome
    if path == "$exit":
        return exit_name
    dotted = path.removeprefix("$output.").removeprefix("$.")
    value: Any = output
    for part in dotted.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return None
    return value


def case_key(value: Any) -> str | None:
    """Switch cases are strings; booleans read as ``true``/``false``, numbers as their JSON text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return None


def _fail(outcome: str, error: str) -> tuple[str, dict[str, Any]]:
    kind = _OUTCOME_TO_RUN_EVENT.get(outcome, "run_failed")
    status = kind.removeprefix("run_")
    return kind, {"status": status, "error": error}


def decide(
    graph: FlatGraph,
    state: RunState,
    source: str,
    outcome: str,
    output: Any,
    error: str | None,
    exit_name: str | None = None,
) -> Decision:
    """Route from a finished node or include (``source``) given its outcome, (resolved) output and exit."""
    exits: list[Exit] = []
    node_id = source
    while True:
        item = graph.edges.get(node_id)
        if item is None:
            if outcome != "ok":
                return Decision(exits, None, _fail(outcome, error or f"Node {source} {outcome}."))
            mount = graph.mount_of(node_id)
            if mount is None:
                return Decision(
                    exits, None, ("run_completed", {"status": "completed", "finalOutput": output})
                )
            name = graph.exit_name(node_id)
            if name is None:
                message = (
                    f"Node {node_id} ended include {mount.path} outside its exits ({', '.join(mount.exits)}); "
                    "declare it in exits= or add an edge."
                )
                return Decision(exits, None, ("run_failed", {"status": "failed", "error": message}))
            exits.append(Exit(mount, name, output))
            node_id, exit_name = mount.path, name
            continue
        if isinstance(item, Edge):
            if outcome != "ok":
                return Decision(exits, None, _fail(outcome, error or f"Node {source} {outcome}."))
            return Decision(exits, item.target)
        if outcome != "ok" and not item.on.startswith("$result."):
            return Decision(exits, None, _fail(outcome, error or f"Node {source} {outcome}."))
        value = read_path(item.on, outcome, output, exit_name)
        key = case_key(value)
        if key is None or key not in item.cases:
            shown = "nothing" if value is None else repr(value)
            message = (
                f"Routing error at {node_id}: {item.on} is {shown}, which matches no case "
                f"({', '.join(item.cases)}). Add a case or fix the node's output."
            )
            return Decision(exits, None, ("run_failed", {"status": "failed", "error": message}))
        return Decision(exits, item.cases[key])


def next_invocation(state: RunState, mount_path: str) -> int:
    """1 + the invocations of this mount so far."""
    return int(state.mounts.get(mount_path, {}).get("invocation", 0)) + 1
