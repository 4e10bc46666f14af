"""What earlier runs of a workflow spent, per node: the medians a projection expects (``docs/planning.md``).

Only finished runs (completed, failed, timed out, cancelled) of the same workflow name in this home are read,
newest first, at most :data:`MAX_RUNS` of them; a run still going or waiting has not spent what it will. Each
node's figures are the medians over its attempts (requests, input and output tokens, cost), its visits per run,
and for a fan-out node the ``run_agent`` children a visit started and what one child spent.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piw.errors import PiwError
from piw.planning.figures import Figures, Span

MAX_RUNS = 20
FINISHED = ("completed", "failed", "timed_out", "cancelled")


@dataclass(frozen=True)
class NodeHistory:
    """One node in earlier runs: min / median / max of its visits per run and of each attempt's spend."""

    runs: int
    """Earlier runs read (the node's visits count 0 in those that never reached it)."""
    visits: Span
    per_visit: Figures
    """What one attempt spent; ``cost`` is unknown (``None``) when the earlier requests had no price."""
    children: Span
    """``run_agent`` children per visit (0 for a plain agent step)."""
    per_child: Figures | None
    """What one child spent (an attempt's spend over its children), for a node that fanned out."""


@dataclass(frozen=True)
class History:
    runs: int
    nodes: dict[str, NodeHistory]

    def of(self, node_id: str) -> NodeHistory | None:
        return self.nodes.get(node_id)


EMPTY = History(0, {})


def read_history(home: Path, workflow_name: str, max_runs: int = MAX_RUNS) -> History:
    """The medians of the newest finished runs of ``workflow_name`` in ``home`` (nothing read is changed)."""
    from piw.store.bundle import load_state, open_bundle
    from piw.store.history import run_summaries

    states = []
    try:
        for summary in run_summaries(home):
            if summary.workflow_name != workflow_name or summary.status not in FINISHED:
                continue
            try:
                states.append(load_state(open_bundle(home, summary.run_id)))
            except PiwError:
                continue  # a damaged bundle is not evidence
            if len(states) >= max_runs:
                break
    except PiwError:
        return EMPTY
    return summarise(states)


def summarise(states: list[Any]) -> History:
    """:class:`History` of already loaded run states."""
    attempts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    visits: dict[str, list[int]] = defaultdict(list)
    for state in states:
        per_run: dict[str, int] = defaultdict(int)
        for step in state.steps:
            per_run[step.node_id] += 1
            usage = dict(step.usage or {})
            usage["input"] = float(usage.get("input") or 0) + float(usage.get("cacheRead") or 0)
            usage["children"] = len(step.children)
            attempts[step.node_id].append(usage)
        for node_id in per_run:
            visits[node_id].append(per_run[node_id])
    runs = len(states)
    nodes: dict[str, NodeHistory] = {}
    for node_id, items in attempts.items():
        counts = visits[node_id] + [0] * (runs - len(visits[node_id]))
        fanned = [_per_child(item) for item in items if item["children"] > 0]
        nodes[node_id] = NodeHistory(
            runs=runs,
            visits=_span([float(count) for count in counts]),
            per_visit=_figures(items),
            children=_span([float(item["children"]) for item in items]),
            per_child=_figures(fanned) if fanned else None,
        )
    return History(runs, nodes)


def _per_child(item: dict[str, Any]) -> dict[str, Any]:
    share = float(item["children"])
    out = {key: float(item.get(key) or 0) / share for key in ("requests", "input", "output")}
    if isinstance(item.get("cost"), int | float):
        out["cost"] = float(item["cost"]) / share
    return out


def _figures(items: list[dict[str, Any]]) -> Figures:
    costs = [float(item["cost"]) for item in items if isinstance(item.get("cost"), int | float)]
    cost = _span(costs) if len(costs) == len(items) else Span(None, None, None)
    return Figures(
        requests=_span([float(item.get("requests") or 0) for item in items]),
        input=_span([float(item.get("input") or 0) for item in items]),
        output=_span([float(item.get("output") or 0) for item in items]),
        cost=cost,
    )


def _span(values: list[float]) -> Span:
    return Span(min(values), float(statistics.median(values)), max(values))
