"""The budget gate: every model request is checked against what the run may still spend, and recorded.

Spend is counted from the trace: after each response the gate appends ``usage_recorded`` (one per request, with
its tokens and cost) and the fold sums them into ``RunState.spent``, so a resumed run, a fork and a continuation
see the same totals and a crash never resets them. Before each request the gate compares what is left with what
the request needs; a request the budget cannot cover is not sent: the gate cancels the attempt (``run_agent``
siblings included, they share its cancel event) and the engine ends the run ``waiting`` on the budget, with what
was spent and on what. ``piw answer RUN '{"topUp": {...}}'`` continues it with more.
The provider wrapper that asks the gate is ``piw.agent_steps.budgeted``.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, Protocol

from piw.workflow.budget import BUDGET_WAIT, WIRE_KEYS, Budget

# The provider layer is imported by the agent steps that use the gate, never for a plain run.
if TYPE_CHECKING:
    from piw.providers.base import ChatRequest
    from piw.providers.messages import AssistantReply
    from piw.store.writer import RunWriter

CHARS_PER_TOKEN = 4
"""The estimate of a request's input tokens before it is sent: its messages' JSON length / 4."""


class Spender(Protocol):
    """The attempt a request is made for (an executor's ``Attempt``): where its spend is recorded."""

    @property
    def node_id(self) -> str: ...

    @property
    def attempt_id(self) -> str: ...


class BudgetGate:
    """One per run: admits or refuses model requests and records what each one spent."""

    def __init__(self, writer: RunWriter) -> None:
        self.writer = writer
        self.stop: dict[str, Any] | None = None
        """Set once a request was refused: the ``finalOutput`` of the ``run_waiting`` the engine writes."""
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether the run has limits: only then are requests checked and recorded (``usage_recorded``)."""
        return bool(self.writer.state.budget)

    def limits(self) -> Budget | None:
        raw = self.writer.state.budget
        return Budget.from_wire(raw) if raw else None

    def admit(self, request: ChatRequest, owner: Spender, step_key: str) -> str | None:
        """``None`` when the request may go; otherwise the refusal, after recording it in :attr:`stop`."""
        limits = self.limits()
        if limits is None:
            return None
        with self._lock:
            if self.stop is not None:
                return str(self.stop["reason"])
            spent = dict(self.writer.state.spent or {})
            first = step_key not in self.writer.state.spent_steps
            estimate = len(json.dumps(request.model_dump(mode="json")["messages"])) // CHARS_PER_TOKEN
            shortfall = _shortfall(limits, spent, first, estimate)
            if shortfall is None:
                return None
            dimension, reason, estimated_cost = shortfall
            self.stop = {
                "reason": reason,
                "limit": dimension,
                "limits": limits.to_wire(),
                "spent": _public_spent(spent),
                "byNode": dict(self.writer.state.spent_by_node),
                "blockedNode": owner.node_id,
                "blockedAttemptId": owner.attempt_id,
                "estimatedInputTokens": estimate,
            }
            if estimated_cost is not None:
                self.stop["estimatedCostUsd"] = estimated_cost
                self.stop["note"] = COST_CHECK
            return reason

    def record(self, message: AssistantReply, owner: Spender, step_key: str, child_key: str | None) -> None:
        """Append ``usage_recorded`` for one request that was sent (retried failures included)."""
        usage = message.usage
        payload: dict[str, Any] = {
            "requests": 1,
            "input": usage.input,
            "output": usage.output,
            "cacheRead": usage.cache_read,
            "cacheWrite": usage.cache_write,
            "step": step_key,
        }
        if usage.cost is not None:
            payload["cost"] = usage.cost
        if child_key is not None:
            payload["childKey"] = child_key
        self.writer.append(
            "agent", "usage_recorded", payload, node_id=owner.node_id, attempt_id=owner.attempt_id
        )


def _public_spent(spent: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in spent.items() if key != "steps"}


def _shortfall(
    limits: Budget, spent: dict[str, Any], first: bool, estimate: int
) -> tuple[str, str, float | None] | None:
    """Why a request cannot be covered — the limit, the reason, and for cost the estimate used — or ``None``
    (each limit checked against what this request needs)."""
    requests = int(spent.get("requests", 0))
    if limits.max_model_requests is not None and requests + 1 > limits.max_model_requests:
        reason = _allows(limits.max_model_requests, "model request", requests, ("was made", "were made"))
        return "modelRequests", reason, None
    steps = int(spent.get("agentSteps", 0))
    if first and limits.max_agent_steps is not None and steps + 1 > limits.max_agent_steps:
        reason = _allows(
            limits.max_agent_steps, "agent step", steps, ("has made requests", "have made requests")
        )
        return "agentSteps", reason, None
    tokens = int(spent.get("tokens", 0))
    if limits.max_tokens is not None and tokens + estimate > limits.max_tokens:
        left = max(limits.max_tokens - tokens, 0)
        return (
            "tokens",
            f"the next request needs about {estimate} tokens and the budget has {left} of {limits.max_tokens} left",
            None,
        )
    if limits.max_cost_usd is not None:
        cost = float(spent.get("cost", 0.0))
        priced = requests - int(spent.get("unpricedRequests", 0))
        average = cost / priced if priced > 0 else 0.0
        if cost + average > limits.max_cost_usd or cost >= limits.max_cost_usd:
            return "costUsd", _cost_reason(limits.max_cost_usd, cost, average), average
    return None


def _allows(limit: int, noun: str, used: int, did: tuple[str, str]) -> str:
    """``the budget allows 1 model request and 1 was made`` (numbers agree with their nouns and verbs)."""
    return f"the budget allows {limit} {noun}{'' if limit == 1 else 's'} and {used} {did[used != 1]}"


def _cost_reason(cap: float, cost: float, average: float) -> str:
    """Why a cost cap stops a run, with the estimate it used (:data:`COST_CHECK` says how it is checked)."""
    spent = f"${cost:.4f} of ${cap:.4f} was spent"
    if cost >= cap:
        return f"{spent}, which leaves nothing for another request"
    return f"{spent}, and the next request is estimated at ${average:.4f}"


COST_CHECK = "A cost cap is checked before each request, against this run's average cost a request."
"""The ``note`` of a cost stop: a request's cost is known only once it is answered, so the cap is checked against
an estimate, and a run can stop below its cap (``docs/fork-replay-budgets.md``)."""


SPENT_KEYS = ("requests", "tokens", "input", "output", "cacheRead", "cacheWrite", "cost", "agentSteps")
"""The keys of ``RunState.spent`` (``unpricedRequests`` counts requests whose cost is unknown)."""

__all__ = ["BUDGET_WAIT", "SPENT_KEYS", "WIRE_KEYS", "BudgetGate"]
