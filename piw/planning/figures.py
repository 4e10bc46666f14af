"""The figures of a projection: low / expected / high per quantity, with where each came from.

A figure that cannot be bounded is ``None`` and says why (an unbounded loop around an agent step has a per-visit
figure and no total: ``docs/planning.md``); nothing here invents a number to fill a gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

QUANTITIES = ("requests", "input", "output", "cost")
"""What is projected: model requests, input tokens, output tokens and USD."""


@dataclass(frozen=True)
class Span:
    """One quantity: ``low`` ≤ ``expected`` ≤ ``high``; ``None`` where it cannot be known."""

    low: float | None
    expected: float | None
    high: float | None

    def times(self, visits: Span) -> Span:
        return Span(
            _mul(self.low, visits.low), _mul(self.expected, visits.expected), _mul(self.high, visits.high)
        )

    def plus(self, other: Span) -> Span:
        return Span(
            _add(self.low, other.low), _add(self.expected, other.expected), _add(self.high, other.high)
        )

    def to_json(self) -> dict[str, float | None]:
        return {"low": _round(self.low), "expected": _round(self.expected), "high": _round(self.high)}


ZERO = Span(0.0, 0.0, 0.0)


def _mul(a: float | None, b: float | None) -> float | None:
    if a == 0 or b == 0:
        return 0.0  # nothing times an unknown is still nothing
    return None if a is None or b is None else a * b


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@dataclass(frozen=True)
class Figures:
    """Requests, input tokens, output tokens and cost, each a :class:`Span`."""

    requests: Span = ZERO
    input: Span = ZERO
    output: Span = ZERO
    cost: Span = ZERO

    def times(self, visits: Span) -> Figures:
        return Figures(*(getattr(self, q).times(visits) for q in QUANTITIES))

    def plus(self, other: Figures) -> Figures:
        return Figures(*(getattr(self, q).plus(getattr(other, q)) for q in QUANTITIES))

    def to_json(self) -> dict[str, Any]:
        return {q: getattr(self, q).to_json() for q in QUANTITIES}


@dataclass(frozen=True)
class NodePlan:
    """One node: how often it runs, what one visit spends, their product, and the sources of each."""

    node_id: str
    node_type: str
    visits: Span
    per_visit: Figures
    total: Figures
    sources: tuple[str, ...] = ()
    unbounded: str | None = None
    """Why this node's total cannot be bounded (a loop around an agent step), else ``None``."""
    children: Span | None = None
    """A fan-out node: the ``run_agent`` children one visit starts."""

    @property
    def spends(self) -> bool:
        return self.total.requests.high != 0

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeId": self.node_id,
            "nodeType": self.node_type,
            "visits": self.visits.to_json(),
            "children": self.children.to_json() if self.children is not None else None,
            "perVisit": self.per_visit.to_json(),
            "total": self.total.to_json(),
            "sources": list(self.sources),
            "unbounded": self.unbounded,
        }


@dataclass(frozen=True)
class Projection:
    """A whole run: per node, in total, the prices used and the earlier runs read."""

    workflow: str
    provider: str | None
    model: str | None
    price: dict[str, Any] | None
    """``{input, output, cached}`` USD per million tokens, or ``None`` when the model has no price."""
    history_runs: int
    nodes: tuple[NodePlan, ...]
    total: Figures
    unbounded: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def bounded(self) -> bool:
        return not self.unbounded

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "provider": self.provider,
            "model": self.model,
            "price": self.price,
            "historyRuns": self.history_runs,
            "bounded": self.bounded,
            "unbounded": list(self.unbounded),
            "total": self.total.to_json(),
            "nodes": [node.to_json() for node in self.nodes],
            "notes": list(self.notes),
            "modelRequestsSent": 0,
        }
