"""The fan-out gate: ``ctx.start_fan_out(n)`` before an action starts ``n`` ``run_agent`` children
(``docs/planning.md``, issue 29 item 4).

It projects what the children will spend (per child: the medians of earlier runs of this node in this home, else
one request at this run's average cost) and asks the run's budget gate whether that fits. When it would cross
the budget, the run parks on the budget gate **before the first child request**, saying how many children, the
projection and what is left; a top-up, or an answer with a smaller ``maxTasks``, continues it: the node runs again
and ``start_fan_out`` then returns the smaller count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from piw.errors import Cancelled
from piw.store.place import home_of
from piw.store.trace import iter_trace

if TYPE_CHECKING:
    from piw.run.executors import Attempt


def fan_out_limit(attempt: Attempt) -> int | None:
    """The ``maxTasks`` a budget answer gave this node's fan-out (recorded in the continuation's ``run_started``)."""
    first = next(iter(iter_trace(attempt.writer.bundle.trace_path)), None)
    continued = (first.payload.get("continuedFrom") or {}) if first is not None else {}
    limit = continued.get("fanOutLimit")
    if continued.get("resumeAt") == attempt.node_id and isinstance(limit, int):
        return limit
    return None


def per_child(attempt: Attempt) -> dict[str, float]:
    """What one child is expected to spend: earlier runs' medians, else one request at the run's average."""
    from piw.planning.history import read_history

    home = home_of(attempt.writer.bundle.path.parent.parent)
    past = read_history(home, attempt.ctx.workflow_name).of(attempt.node_id)
    if past is not None and past.per_child is not None:
        figures = past.per_child
        out = {"requests": figures.requests.expected or 1.0}
        out["tokens"] = (figures.input.expected or 0.0) + (figures.output.expected or 0.0)
        if figures.cost.expected is not None:
            out["cost"] = figures.cost.expected
        return out
    spent: dict[str, Any] = attempt.writer.state.spent or {}
    priced = int(spent.get("requests", 0)) - int(spent.get("unpricedRequests", 0))
    out = {"requests": 1.0}
    if priced > 0:
        out["cost"] = float(spent.get("cost", 0.0)) / priced
    return out


def start_fan_out(attempt: Attempt, children: int) -> int:
    """How many of ``children`` may start; raises ``Cancelled`` after parking the run when none may."""
    if isinstance(children, bool) or not isinstance(children, int) or children < 0:
        raise ValueError(f"start_fan_out takes a whole number of children, got {children!r}")
    limit = fan_out_limit(attempt)
    allowed = children if limit is None else min(children, limit)
    gate = attempt.budget
    if gate is None or not gate.active or allowed == 0:
        return allowed
    refusal = gate.fan_out(attempt, allowed, per_child(attempt))
    if refusal is None:
        return allowed
    gate.cancel_when_idle(attempt.cancel)
    raise Cancelled(f"Not started: {refusal}.")
