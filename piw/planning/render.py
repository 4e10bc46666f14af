"""The text of ``piw run --plan``: one row per node that can spend, the total, and where the figures came from.

Workflow text (node ids) is printed through :func:`piw.terminal.single_line` by the caller's console; figures are
``low / expected / high``, ``?`` where unknown, and an unbounded total says so instead of printing a number.
"""

from __future__ import annotations

from piw.planning.figures import Figures, NodePlan, Projection, Span
from piw.terminal import single_line


def _number(value: float | None) -> str:
    if value is None:
        return "?"
    if value >= 10_000:
        return f"{value / 1000:,.0f}k"
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def _money(value: float | None) -> str:
    return "?" if value is None else f"${value:.4f}"


def span_text(span: Span, money: bool = False) -> str:
    show = _money if money else _number
    return f"{show(span.low)} / {show(span.expected)} / {show(span.high)}"


def figures_lines(figures: Figures, indent: str) -> list[str]:
    return [
        f"{indent}requests      {span_text(figures.requests)}",
        f"{indent}input tokens  {span_text(figures.input)}",
        f"{indent}output tokens {span_text(figures.output)}",
        f"{indent}cost          {span_text(figures.cost, money=True)}",
    ]


def node_lines(plan: NodePlan) -> list[str]:
    head = f"  {single_line(plan.node_id)}  ({plan.node_type})  visits {span_text(plan.visits)}"
    if plan.children is not None:
        head += f" × children {span_text(plan.children)}"
    lines = [head]
    if plan.unbounded:
        lines.append(f"    unbounded: {single_line(plan.unbounded)}; per visit:")
        lines += figures_lines(plan.per_visit, "      ")
    else:
        lines += figures_lines(plan.total, "    ")
    lines.append(f"    from: {', '.join(single_line(s) for s in plan.sources)}")
    return lines


def render(projection: Projection) -> list[str]:
    """The lines ``piw run --plan`` prints (0 model requests were sent to make them)."""
    model = f"{projection.provider}/{projection.model}" if projection.provider else "no model"
    if projection.price is None:
        price = "no price"
    elif projection.price.get("local"):
        price = "local: $0"
    else:
        price = f"${projection.price['input']:g} in / ${projection.price['output']:g} out per million tokens"
    runs = projection.history_runs
    lines = [
        f"Plan for {single_line(projection.workflow)} on {single_line(model)} ({price}); "
        f"{runs} earlier run{'' if runs == 1 else 's'} read; 0 model requests sent.",
        "Figures are low / expected / high.",
        "",
    ]
    if not projection.nodes:
        lines.append("  No step of this workflow asks a model.")
    for plan in projection.nodes:
        lines += node_lines(plan)
    lines += ["", "Total" + ("" if projection.bounded else " (unbounded: no high figure)")]
    lines += figures_lines(projection.total, "  ")
    if not projection.bounded:
        lines.append(
            f"  A loop around {', '.join(projection.unbounded)} has no bound but max_steps: the total counts what "
            "earlier runs did, or is unknown; the per-visit figures above are what each turn costs."
        )
    lines += [f"Note: {single_line(note)}" for note in projection.notes]
    return lines
