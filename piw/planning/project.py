"""A run's projection: the graph's bounds × what one visit of each node spends × the model's prices.

Sources, strongest first (each figure names the ones it used, ``docs/planning.md``):

- ``history``: the medians (and min / max) of earlier finished runs of this workflow in this home;
- ``graph``: which nodes every run visits, branches (split evenly unless a compute decides them), loops
  (bounded only by ``max_steps``, so their total is *unbounded*), declared fan-outs (``action(fan_out=...)``);
- ``prompt``: the size of a prompt that depends only on the input, at 4 characters a token;
- ``agent.max_turns``: the most requests one agent step can make;
- ``default``: :data:`DEFAULT_OUTPUT_TOKENS` output tokens a request when nothing else says.

Prices turn tokens into USD; a model without a price gives an unknown cost, except a local one, which is free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from piw.planning.figures import ZERO, Figures, NodePlan, Projection, Span
from piw.planning.graph_walk import Reach, walk
from piw.planning.history import History, NodeHistory
from piw.run.budget import CHARS_PER_TOKEN
from piw.workflow.definition import ActionNode, AgentNode
from piw.workflow.graph import GraphNode
from piw.workflow.loader import LoadedWorkflow

DEFAULT_OUTPUT_TOKENS = 200
"""Output tokens a request is expected to produce when no earlier run says (a structured step's reply)."""
REQUEST_OVERHEAD_TOKENS = 350
"""Tokens a request carries besides the prompt: the step contract and the ``workflow`` tool's schema."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens; ``local`` when it is 0 because the model runs on this machine."""

    input: float
    output: float
    cached: float | None = None
    local: bool = False

    def of(self, input_tokens: float | None, output_tokens: float | None) -> float | None:
        if self.local:
            return 0.0
        if input_tokens is None or output_tokens is None:
            return None
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input, "output": self.output, "cached": self.cached, "local": self.local}


@dataclass(frozen=True)
class Setting:
    """What the projection needs besides the workflow: its input, history, price and the agent limits."""

    input: Any
    history: History
    price: Price | None
    provider: str | None = None
    model: str | None = None
    max_turns: int = 50


def project(loaded: LoadedWorkflow, setting: Setting) -> Projection:
    """The projection of one run of ``loaded`` with ``setting``; it runs no step that is not a pure compute."""
    graph = loaded.graph
    reach, outputs = walk(graph, setting.input)
    plans = [
        _node_plan(gnode, reach[node_id], setting, outputs, loaded.definition.max_steps)
        for node_id, gnode in graph.nodes.items()
    ]
    total = Figures()
    for plan in plans:
        total = total.plus(plan.total)
    unbounded = tuple(plan.node_id for plan in plans if plan.unbounded)
    notes: list[str] = []
    if setting.provider is None:
        notes.append("No provider selected (pass --provider or set `default`): cost is unknown.")
    elif setting.price is None:
        notes.append(
            f"{setting.provider}/{setting.model} has no price: cost is unknown (set [providers.NAME.prices])."
        )
    if setting.history.runs == 0:
        notes.append(
            "No earlier run of this workflow in this home: figures come from the graph and prompt sizes."
        )
    return Projection(
        workflow=loaded.definition.name,
        provider=setting.provider,
        model=setting.model,
        price=setting.price.to_json() if setting.price else None,
        history_runs=setting.history.runs,
        nodes=tuple(plan for plan in plans if plan.spends or plan.unbounded),
        total=total,
        unbounded=unbounded,
        notes=tuple(notes),
    )


def _node_plan(
    gnode: GraphNode, reach: Reach, setting: Setting, outputs: dict[str, Any], max_steps: int
) -> NodePlan:
    node = gnode.node
    past = setting.history.of(gnode.id)
    sources: list[str] = []
    children: Span | None = None
    if isinstance(node, AgentNode):
        per_visit = _agent_visit(node, gnode, past, setting, outputs, sources)
    elif isinstance(node, ActionNode) and node.run is not None:
        per_visit, children = _action_visit(node, gnode, past, setting, outputs, sources)
    else:
        per_visit = Figures()
    visits, unbounded = _visits(reach, past, max_steps, sources, spends=per_visit.requests.high != 0)
    total = per_visit.times(visits)
    if unbounded:
        total = Figures(
            *(
                Span(getattr(total, q).low, getattr(total, q).expected, None)
                for q in ("requests", "input", "output", "cost")
            )
        )
    return NodePlan(
        gnode.id, node.node_type, visits, per_visit, total, tuple(dict.fromkeys(sources)), unbounded, children
    )


def _visits(
    reach: Reach, past: NodeHistory | None, max_steps: int, sources: list[str], *, spends: bool
) -> tuple[Span, str | None]:
    low = 1.0 if reach.always else 0.0
    if not reach.possible:
        sources.append("graph: routed away by the input")
        return Span(0.0, 0.0, 0.0), None
    if reach.cycle is not None and spends:
        loop = " → ".join(reach.cycle)
        reason = f"on the loop {loop}, which only max_steps ({max_steps}) stops"
        if past is not None:
            sources.append(f"history: {past.runs} runs")
            return Span(min(low, past.visits.low or 0), past.visits.expected, None), reason
        return Span(low, None, None), reason
    if past is not None:
        sources.append(f"history: {past.runs} runs")
        return Span(
            low,
            min(1.0, past.visits.expected or 0) if reach.cycle is None else past.visits.expected,
            1.0 if reach.cycle is None else past.visits.high,
        ), None
    sources.append("graph")
    return Span(low, reach.expected, 1.0), None


def _agent_visit(
    node: AgentNode,
    gnode: GraphNode,
    past: NodeHistory | None,
    setting: Setting,
    outputs: dict[str, Any],
    sources: list[str],
) -> Figures:
    if past is not None and past.per_visit.requests.expected:
        sources.append("history medians")
        return _priced(past.per_visit, setting, sources)
    prompt = _prompt_tokens(node.prompt, gnode, setting.input, outputs)
    return _guess(prompt, node.max_output_tokens, setting, sources)


def _action_visit(
    node: ActionNode,
    gnode: GraphNode,
    past: NodeHistory | None,
    setting: Setting,
    outputs: dict[str, Any],
    sources: list[str],
) -> tuple[Figures, Span | None]:
    bound = _fan_out_bound(node, gnode, setting.input, outputs)
    if bound is None and node.fan_out is not None:
        sources.append("fan-out bound needs earlier outputs")
    if past is not None and past.per_child is not None:
        sources.append("history medians per child")
        child = _priced(past.per_child, setting, sources)
        seen = past.children
        high = float(bound) if bound is not None else None
        expected = seen.expected if high is None else min(seen.expected or 0, high)
        children = Span(min(seen.low or 0, expected or 0), expected, high)
    elif bound is not None:
        sources.append("declared fan_out")
        child = _guess(None, None, setting, sources)
        children = Span(1.0 if bound else 0.0, float(bound), float(bound))
    elif past is not None and past.per_visit.requests.expected:
        sources.append("history medians")
        return _priced(past.per_visit, setting, sources), None
    else:
        return Figures(), None
    if bound is not None:
        sources.append(f"fan_out ≤ {bound}")
    else:
        sources.append("no declared fan_out: the high figure is unknown")
    return child.times(children), children


def _fan_out_bound(
    node: ActionNode, gnode: GraphNode, input_value: Any, outputs: dict[str, Any]
) -> int | None:
    declared = node.fan_out
    if declared is None or isinstance(declared, int):
        return declared
    value = _call(declared, gnode, input_value, outputs)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _prompt_tokens(prompt: Any, gnode: GraphNode, input_value: Any, outputs: dict[str, Any]) -> float | None:
    text = _call(prompt, gnode, input_value, outputs) if callable(prompt) else prompt
    if not isinstance(text, str):
        return None
    return float(len(text) // CHARS_PER_TOKEN + REQUEST_OVERHEAD_TOKENS)


def _call(function: Callable[..., Any], gnode: GraphNode, input_value: Any, outputs: dict[str, Any]) -> Any:
    from piw.workflow.context import NodeContext

    ctx = NodeContext(
        input=input_value,
        outputs=dict(outputs),
        results={},
        run_id="plan",
        node_id=gnode.id,
        attempt_id="plan",
    )
    try:
        return function(ctx)
    except Exception:  # it needs outputs only the run will have
        return None


def _guess(prompt: float | None, max_output: int | None, setting: Setting, sources: list[str]) -> Figures:
    """One agent step without history: one request expected, ``max_turns`` at most."""
    turns = float(setting.max_turns)
    sources.append("agent.max_turns")
    if prompt is not None:
        sources.append("prompt size")
        input_span = Span(prompt, prompt, prompt * turns)
    else:
        input_span = Span(None, None, None)
    sources.append("default output size")
    output_high = float(max_output) * turns if max_output else None
    output_span = Span(1.0, float(DEFAULT_OUTPUT_TOKENS), output_high)
    figures = Figures(requests=Span(1.0, 1.0, turns), input=input_span, output=output_span)
    return _priced(figures, setting, sources, from_tokens=True)


def _priced(figures: Figures, setting: Setting, sources: list[str], from_tokens: bool = False) -> Figures:
    """``figures`` with its cost from the price (or kept from history when there is no price)."""
    price = setting.price
    if price is None:
        cost = figures.cost if not from_tokens else Span(None, None, None)
        return Figures(figures.requests, figures.input, figures.output, cost)
    sources.append("local model: free" if price.local else "prices")
    cost = Span(
        *(
            price.of(getattr(figures.input, side), getattr(figures.output, side))
            for side in ("low", "expected", "high")
        )
    )
    return Figures(figures.requests, figures.input, figures.output, cost)


__all__ = ["DEFAULT_OUTPUT_TOKENS", "ZERO", "Price", "Setting", "project"]
