"""Budgets: limits on what a run may spend on models, declared by a workflow and tightened per run.

``define_workflow(budget=Budget(max_cost_usd=2.5))`` sets the workflow's limits; ``piw run --budget
cost=2.50,tokens=200k`` sets or tightens them for one run (a flag never loosens a declared limit). The limits a
run starts with are recorded in its ``run_started`` event, so resume, fork and continuations see the same ones;
what was spent is counted from the trace (``usage_recorded``), never from memory.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any

from piw.errors import DefinitionError, UsageError

WIRE_KEYS = {
    "max_cost_usd": "costUsd",
    "max_tokens": "tokens",
    "max_model_requests": "modelRequests",
    "max_agent_steps": "agentSteps",
}
"""Python field → the camelCase key used in ``run_started.budget``, ``state.json`` and top-ups."""

FLAG_KEYS = {
    "cost": "max_cost_usd",
    "tokens": "max_tokens",
    "requests": "max_model_requests",
    "steps": "max_agent_steps",
}
"""``--budget`` keys → fields."""

BUDGET_WAIT = "budget"
"""``run_waiting.waitingOn`` of a run stopped by its budget (a checkpoint's node id otherwise)."""

_SUFFIX = {"k": 1_000, "m": 1_000_000}
_NUMBER = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<suffix>[kKmM]?)")


@dataclass(frozen=True)
class Budget:
    """Limits on model spending for one run; ``None`` means no limit on that dimension.

    ``max_cost_usd`` counts the USD cost providers report or config prices give; ``max_tokens`` every token
    (input, output and cache); ``max_model_requests`` every request sent; ``max_agent_steps`` the agent steps
    (attempts and ``ctx.run_agent`` children) that made a request.
    """

    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_model_requests: int | None = None
    max_agent_steps: int | None = None

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None:
                continue
            whole = item.name != "max_cost_usd"
            valid_type = isinstance(value, int) if whole else isinstance(value, int | float)
            if isinstance(value, bool) or not valid_type or not math.isfinite(value) or value < 0:
                kind = "a whole number" if whole else "a number"
                raise DefinitionError(f"Budget {item.name} must be {kind} of 0 or more, got {value!r}")

    @property
    def empty(self) -> bool:
        return all(getattr(self, item.name) is None for item in fields(self))

    def tightened(self, other: Budget | None) -> Budget:
        """The stricter limit of each dimension (a per-run flag sets or tightens, never loosens)."""
        if other is None:
            return self
        values: dict[str, Any] = {}
        for item in fields(self):
            mine, theirs = getattr(self, item.name), getattr(other, item.name)
            values[item.name] = theirs if mine is None else mine if theirs is None else min(mine, theirs)
        return Budget(**values)

    def topped_up(self, extra: Budget) -> Budget:
        """Each limit raised by ``extra`` (a top-up of a dimension without a limit leaves it unlimited)."""
        values: dict[str, Any] = {}
        for item in fields(self):
            mine, more = getattr(self, item.name), getattr(extra, item.name)
            values[item.name] = mine if mine is None or more is None else mine + more
        return Budget(**values)

    def to_wire(self) -> dict[str, Any]:
        return {
            WIRE_KEYS[item.name]: getattr(self, item.name)
            for item in fields(self)
            if getattr(self, item.name) is not None
        }

    @classmethod
    def from_wire(cls, data: Any, what: str = "budget") -> Budget:
        """Read the camelCase form; unknown keys and bad values are one clear ``UsageError``."""
        if not isinstance(data, dict):
            raise UsageError(
                f"The {what} must be a JSON object with costUsd, tokens, modelRequests or agentSteps."
            )
        by_wire = {wire: name for name, wire in WIRE_KEYS.items()}
        unknown = sorted(set(data) - set(by_wire))
        if unknown:
            raise UsageError(
                f"Unknown {what} key {unknown[0]!r}; use costUsd, tokens, modelRequests or agentSteps."
            )
        try:
            return cls(**{by_wire[key]: value for key, value in data.items()})
        except DefinitionError as exc:
            raise UsageError(f"Invalid {what}: {exc}") from None


def parse_top_up(value: Any) -> Budget:
    """The ``piw answer RUN '{"topUp": {...}}'`` of a run waiting on its budget; ``UsageError`` otherwise."""
    if not isinstance(value, dict) or set(value) != {"topUp"}:
        raise UsageError(
            'A run waiting on its budget takes {"topUp": {"costUsd": 1.0}} (keys costUsd, tokens, modelRequests, '
            "agentSteps); to stop it instead, cancel it with 'piw cancel RUN'."
        )
    extra = Budget.from_wire(value["topUp"], "top-up")
    if extra.empty:
        raise UsageError(
            "The top-up is empty; add at least one of costUsd, tokens, modelRequests, agentSteps."
        )
    return extra


ANSWER_KEYS = ("topUp", "maxTasks", "confirm")
"""What ``piw answer`` may give a run waiting on its budget (``docs/planning.md``)."""


def parse_budget_answer(value: Any) -> dict[str, Any]:
    """The answer to a budget wait, normalised: ``topUp`` (more budget), ``maxTasks`` (a smaller fan-out: the
    stopped node's ``ctx.start_fan_out`` then allows at most that many children) and ``confirm: true`` (go ahead
    with a run parked by ``--confirm-above``); ``UsageError`` otherwise."""
    if not isinstance(value, dict) or not value or set(value) - set(ANSWER_KEYS):
        raise UsageError(
            'A run waiting on its budget takes {"topUp": {"costUsd": 1.0}} (keys costUsd, tokens, modelRequests, '
            'agentSteps), {"maxTasks": N} for a smaller fan-out, or {"confirm": true} after --confirm-above; to stop '
            "it instead, cancel it with 'piw cancel RUN'."
        )
    answer: dict[str, Any] = {
        "topUp": parse_top_up({"topUp": value["topUp"]}).to_wire() if "topUp" in value else {}
    }
    if "maxTasks" in value:
        tasks = value["maxTasks"]
        if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
            raise UsageError(f"maxTasks must be a whole number of 1 or more, got {tasks!r}.")
        answer["maxTasks"] = tasks
    if "confirm" in value:
        if value["confirm"] is not True:
            raise UsageError('confirm takes true: {"confirm": true}; to stop the run, cancel it instead.')
        answer["confirm"] = True
    return answer


def parse_budget(text: str) -> Budget:
    """``cost=2.50,tokens=200k,requests=20,steps=5`` → ``Budget``; malformed text is one ``UsageError``."""
    values: dict[str, Any] = {}
    for part in (piece.strip() for piece in text.split(",")):
        if not part:
            continue
        key, sep, raw = part.partition("=")
        key, raw = key.strip().lower(), raw.strip()
        if not sep or key not in FLAG_KEYS:
            raise UsageError(
                f"--budget {text!r}: {part!r} is not KEY=VALUE with KEY one of cost, tokens, requests, steps "
                "(e.g. --budget cost=2.50,tokens=200k)."
            )
        if FLAG_KEYS[key] in values:
            raise UsageError(f"--budget {text!r}: {key} is given twice.")
        match = _NUMBER.fullmatch(raw)
        if match is None:
            raise UsageError(
                f"--budget {key}={raw!r}: give a number of 0 or more (k and m suffixes allowed)."
            )
        number = float(match["number"]) * _SUFFIX.get(match["suffix"].lower(), 1)
        if key == "cost":
            values[FLAG_KEYS[key]] = number
        elif number != int(number):
            raise UsageError(f"--budget {key}={raw!r}: give a whole number.")
        else:
            values[FLAG_KEYS[key]] = int(number)
    if not values:
        raise UsageError("--budget needs at least one limit, e.g. --budget cost=2.50,tokens=200k.")
    return Budget(**values)
