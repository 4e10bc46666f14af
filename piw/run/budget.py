"""The budget gate: every model request is checked against what the run may still spend, and recorded.

Spend is counted from the trace: after each response the gate appends ``usage_recorded`` (one per request, with
its tokens and cost) and the fold sums them into ``RunState.spent``, so a resumed run, a fork and a continuation
see the same totals and a crash never resets them. Before each request the gate compares what is left with what
the request needs; a request the budget cannot cover is not sent: the gate cancels the attempt (``run_agent``
siblings included, they share its cancel event) and the engine ends the run ``waiting`` on the budget, with what
was spent and on what. ``piw answer RUN '{"topUp": {...}}'`` continues it with more.
The provider wrapper that asks the gate is ``piw.agent_steps.budgeted``.

Parallel children (``ctx.run_agent`` in threads, orchestrate's fan-out) make the check a reservation: a request
that is admitted holds its share (one request, its estimated input tokens, its estimated cost, its step when it
is the step's first) until its ``usage_recorded`` is appended, and every later check counts what is held as
spent. So two children can never both see the last request's room and both send. A refusal while siblings are
in flight lets their requests finish and be recorded; the attempt is cancelled when the last one is released
(``docs/fork-replay-budgets.md``, ``docs/planning.md``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
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
        self._held: dict[int, Reservation] = {}
        """Admitted requests whose spend is not in the trace yet, by reservation number."""
        self._next = 0
        self._to_cancel: list[threading.Event] = []
        """Cancel events of refused attempts, set once no request is in flight any more."""

    @property
    def active(self) -> bool:
        """Whether the run has limits: only then are requests checked and recorded (``usage_recorded``)."""
        return bool(self.writer.state.budget)

    def limits(self) -> Budget | None:
        raw = self.writer.state.budget
        return Budget.from_wire(raw) if raw else None

    def admit(self, request: ChatRequest, owner: Spender, step_key: str) -> str | None:
        """``None`` when the request may go; otherwise the refusal, after recording it in :attr:`stop`.

        Kept for callers that do not hold reservations: :meth:`reserve` is what the provider wrapper uses."""
        verdict = self.reserve(request, owner, step_key)
        if isinstance(verdict, Reservation):
            self.release(verdict)
            return None
        return verdict

    def reserve(self, request: ChatRequest, owner: Spender, step_key: str) -> Reservation | str | None:
        """Hold this request's share of the budget, atomically with the check: a :class:`Reservation` to
        :meth:`release` once its usage is recorded, the refusal text, or ``None`` when the run has no limits."""
        limits = self.limits()
        if limits is None:
            return None
        estimate = len(json.dumps(request.model_dump(mode="json")["messages"])) // CHARS_PER_TOKEN
        with self._lock:
            if self.stop is not None:
                return str(self.stop["reason"])
            spent = dict(self.writer.state.spent or {})
            held_steps = {held.step_key for held in self._held.values() if held.first}
            first = step_key not in self.writer.state.spent_steps and step_key not in held_steps
            average = _average_cost(spent)
            with_held = _with_held(spent, self._held.values())
            shortfall = _shortfall(limits, with_held, first, estimate, average)
            if shortfall is None:
                self._next += 1
                held = Reservation(self._next, step_key, first, estimate, average)
                self._held[held.number] = held
                return held
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
            if self._held:
                self.stop["inFlight"] = len(self._held)
            if estimated_cost is not None:
                self.stop["estimatedCostUsd"] = estimated_cost
                self.stop["note"] = COST_CHECK
            return reason

    def fan_out(self, owner: Spender, children: int, per_child: dict[str, float]) -> str | None:
        """The fan-out gate: ``None`` when ``children`` children at ``per_child`` (``requests``, ``tokens``,
        ``cost``, each optional) fit in what the budget has left; otherwise the refusal, recorded in
        :attr:`stop` with the children, the projection and what is left, before any child request is sent."""
        limits = self.limits()
        if limits is None or children <= 0:
            return None
        with self._lock:
            if self.stop is not None:
                return str(self.stop["reason"])
            spent = dict(self.writer.state.spent or {})
            used = _with_held(spent, self._held.values())
            projection = {key: value * children for key, value in per_child.items()}
            projection["agentSteps"] = float(children)
            left = _left(limits, used)
            over = next(
                (key for key, room in left.items() if key in projection and projection[key] > room), None
            )
            if over is None:
                return None
            room = left[over]
            fits = int(room // per_child[over]) if over != "agentSteps" and per_child.get(over) else int(room)
            fits = max(0, min(fits, children - 1))
            reason = (
                f"the fan-out of {children} children is projected at {_projected(projection)}, and the budget has "
                f"{_amount(over, room)} left"
            )
            self.stop = {
                "reason": reason,
                "limit": SPENT_TO_LIMIT[over],
                "limits": limits.to_wire(),
                "spent": _public_spent(spent),
                "byNode": dict(self.writer.state.spent_by_node),
                "blockedNode": owner.node_id,
                "blockedAttemptId": owner.attempt_id,
                "fanOut": {"children": children, "projection": projection, "remaining": left, "fits": fits},
            }
            return reason

    def cancel_when_idle(self, cancel: threading.Event) -> None:
        """Set ``cancel`` now, or once the requests still in flight are recorded (a refused sibling waits)."""
        with self._lock:
            if self._held:
                self._to_cancel.append(cancel)
                return
        cancel.set()

    def release(self, held: Reservation) -> None:
        """Give back what ``held`` reserved (its real spend, if any, is in the trace by now)."""
        with self._lock:
            self._held.pop(held.number, None)
            waiting = [] if self._held else self._to_cancel
            self._to_cancel = [] if not self._held else self._to_cancel
        for cancel in waiting:
            cancel.set()

    def record(
        self,
        message: AssistantReply,
        owner: Spender,
        step_key: str,
        child_key: str | None,
        held: Reservation | None = None,
    ) -> None:
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
        with (
            self._lock
        ):  # appended under the lock: a check sees the request either held or spent, never neither
            self.writer.append(
                "agent", "usage_recorded", payload, node_id=owner.node_id, attempt_id=owner.attempt_id
            )
            if held is not None:
                self._held.pop(held.number, None)
        if held is not None:
            self.release(held)


@dataclass(frozen=True)
class Reservation:
    """One admitted request's share of the budget, held until its usage is recorded."""

    number: int
    step_key: str
    first: bool
    """Whether it holds its step's agent-step slot (the step's first request)."""
    tokens: int
    cost: float
    """The estimate held against a cost cap: the run's average cost a priced request."""


def _average_cost(spent: dict[str, Any]) -> float:
    priced = int(spent.get("requests", 0)) - int(spent.get("unpricedRequests", 0))
    return float(spent.get("cost", 0.0)) / priced if priced > 0 else 0.0


def _with_held(spent: dict[str, Any], held: Any) -> dict[str, Any]:
    """``spent`` with the reserved requests counted as if they had been answered with their estimates."""
    total = dict(spent)
    for item in held:
        total["requests"] = int(total.get("requests", 0)) + 1
        total["unpricedRequests"] = int(total.get("unpricedRequests", 0)) + 1  # not in the average
        total["tokens"] = int(total.get("tokens", 0)) + item.tokens
        total["cost"] = float(total.get("cost", 0.0)) + item.cost
        total["agentSteps"] = int(total.get("agentSteps", 0)) + (1 if item.first else 0)
    return total


SPENT_TO_LIMIT = {
    "requests": "modelRequests",
    "tokens": "tokens",
    "cost": "costUsd",
    "agentSteps": "agentSteps",
}


def _left(limits: Budget, used: dict[str, Any]) -> dict[str, float]:
    """What each limited dimension has left (keys of ``spent``)."""
    left: dict[str, float] = {}
    if limits.max_model_requests is not None:
        left["requests"] = max(0.0, limits.max_model_requests - float(used.get("requests", 0)))
    if limits.max_tokens is not None:
        left["tokens"] = max(0.0, limits.max_tokens - float(used.get("tokens", 0)))
    if limits.max_cost_usd is not None:
        left["cost"] = max(0.0, limits.max_cost_usd - float(used.get("cost", 0.0)))
    if limits.max_agent_steps is not None:
        left["agentSteps"] = max(0.0, limits.max_agent_steps - float(used.get("agentSteps", 0)))
    return left


def _amount(key: str, value: float) -> str:
    if key == "cost":
        return f"${value:.4f}"
    words = {"requests": "request", "tokens": "token", "agentSteps": "agent step"}
    count = round(value)
    return f"{count:,} {words[key]}{'' if count == 1 else 's'}"


def _projected(projection: dict[str, float]) -> str:
    return " · ".join(
        _amount(key, projection[key]) for key in ("requests", "tokens", "cost") if key in projection
    )


def _public_spent(spent: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in spent.items() if key != "steps"}


def _shortfall(
    limits: Budget, spent: dict[str, Any], first: bool, estimate: int, average: float
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
