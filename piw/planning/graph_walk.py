"""How often each node of a flat graph can run, from the graph alone (``docs/planning.md``).

The walk starts at the entry with one visit and pushes it along the edges. A compute step whose inputs are known
(the run input and the outputs of computes before it) is evaluated, since a compute is a pure function of its
context, so a switch on its output routes exactly; any other switch splits the visit evenly over its cases, and a
``$result`` switch sends it down the ``ok`` case (a failure is not expected, though the low figure allows it).
Nodes on a cycle can repeat up to ``max_steps`` times; the walk marks them so the projection can say the loop is
unbounded instead of inventing how often it turns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from piw.workflow.definition import ComputeNode, Edge, Switch
from piw.workflow.graph import FlatGraph, successors
from piw.workflow.routing import case_key, read_path


@dataclass(frozen=True)
class Reach:
    """One node: its expected visits from the walk, whether every run must visit it, and its cycle."""

    expected: float
    always: bool
    possible: bool
    """``False`` when a compute the walk evaluated routes every run away from this node."""
    cycle: tuple[str, ...] | None
    """The nodes of the loop this node is on, or ``None``."""


def walk(graph: FlatGraph, input_value: Any) -> tuple[dict[str, Reach], dict[str, Any]]:
    """``(reach per node, outputs of the computes it could evaluate)``."""
    cycles = _cycles(graph)
    outputs: dict[str, Any] = {}
    order = _order(graph)
    weight: dict[str, float] = {node: 0.0 for node in graph.nodes}
    weight[graph.start_at] = 1.0
    possible = {graph.start_at}
    for node_id in order:
        share = weight[node_id]
        if node_id not in possible:
            continue
        gnode = graph.nodes[node_id]
        if isinstance(gnode.node, ComputeNode) and share >= 1.0:
            known = _evaluate(gnode.node, node_id, input_value, outputs)
            if known is not _UNKNOWN:
                outputs[node_id] = known
        for target, part in _split(graph, node_id, outputs.get(node_id, _UNKNOWN)).items():
            if target in cycles.get(node_id, ()) and _is_back(order, node_id, target):
                continue  # a loop's way back: counted by the cycle, not pushed again
            possible.add(target)
            weight[target] = min(1.0, weight[target] + share * part)
    always = _always(graph)
    reach = {
        node_id: Reach(weight[node_id], node_id in always, node_id in possible, cycles.get(node_id))
        for node_id in graph.nodes
    }
    return reach, outputs


_UNKNOWN = object()


def _evaluate(node: ComputeNode, node_id: str, input_value: Any, outputs: Mapping[str, Any]) -> Any:
    from piw.workflow.context import NodeContext

    if not callable(node.run):
        return node.run
    ctx = NodeContext(
        input=input_value,
        outputs=dict(outputs),
        results={},
        run_id="plan",
        node_id=node_id,
        attempt_id="plan",
    )
    try:
        return node.run(ctx)
    except Exception:  # needs an output the plan does not have: routed by splitting instead
        return _UNKNOWN


def _split(graph: FlatGraph, node_id: str, output: Any) -> dict[str, float]:
    item = graph.edges.get(node_id)
    targets = successors(graph, node_id)
    if not targets:
        return {}
    if item is None or isinstance(item, Edge):
        return {target: 1.0 for target in targets}
    assert isinstance(item, Switch)
    resolve = {case: graph.mounts[t].start if t in graph.mounts else t for case, t in item.cases.items()}
    if item.on == "$result.outcome":
        chosen = resolve.get("ok")
        if chosen is None:
            return {target: 1.0 / len(targets) for target in targets}
        return {target: 1.0 if target == chosen else 0.0 for target in targets}  # a failure stays possible
    if output is not _UNKNOWN and item.on != "$exit":
        key = case_key(read_path(item.on, "ok", output, None))
        if key is not None and key in resolve:
            return {resolve[key]: 1.0}
    distinct = sorted(set(resolve.values()))
    return {target: 1.0 / len(distinct) for target in distinct}


def _order(graph: FlatGraph) -> list[str]:
    """Nodes in depth-first order from the entry with loop edges left out (a topological order of the rest)."""
    seen: set[str] = set()
    finished: list[str] = []
    stack: list[tuple[str, list[str]]] = [(graph.start_at, list(successors(graph, graph.start_at)))]
    seen.add(graph.start_at)
    while stack:
        node, pending = stack[-1]
        if pending:
            nxt = pending.pop(0)
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, list(successors(graph, nxt))))
            continue
        finished.append(node)
        stack.pop()
    order = list(reversed(finished))
    return order + [node for node in graph.nodes if node not in seen]


def _is_back(order: list[str], source: str, target: str) -> bool:
    return order.index(target) <= order.index(source)


def _cycles(graph: FlatGraph) -> dict[str, tuple[str, ...]]:
    """Each node on a cycle → the nodes of its strongly connected component (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: dict[str, tuple[str, ...]] = {}
    counter = 0
    for root in graph.nodes:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            nexts = successors(graph, node)
            if i < len(nexts):
                work.append((node, i + 1))
                target = nexts[i]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                looped = len(component) > 1 or node in successors(graph, node)
                if looped:
                    for member in component:
                        result[member] = tuple(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return result


def _always(graph: FlatGraph) -> set[str]:
    """Nodes every path from the entry to an end passes through (the entry, and each node without which no end
    can be reached)."""
    ends = {node for node in graph.nodes if not successors(graph, node)}

    def reaches_end(without: str | None) -> bool:
        if graph.start_at == without:
            return False
        seen = {graph.start_at}
        todo = [graph.start_at]
        while todo:
            node = todo.pop()
            if node in ends:
                return True
            for target in successors(graph, node):
                if target != without and target not in seen:
                    seen.add(target)
                    todo.append(target)
        return False

    return {node for node in graph.nodes if not reaches_end(node)}
