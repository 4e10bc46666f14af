"""Checkpoint continuations: what a new run carries from the waiting run it continues (``persistence.md`` §8).

A waiting run is final; an answer starts a NEW bundle whose ``run_started`` names the parent
(``continuedFrom``) and carries the parent's outputs, results, steps and include state, with the checkpoint's
output replaced by the answer, so the edges after the gate (and ``ctx.outputs``) see the answer. Steps carried
count against ``maxSteps``. The update projection is not carried: it starts empty. Carried values are read with
their artifacts resolved and externalized again by the new run's writer, which copies every referenced artifact
into the new bundle (content-addressed, so the files are identical).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from piw.store.bundle import Bundle
from piw.store.fold import RunState, result_to_json, step_to_json
from piw.workflow.budget import BUDGET_WAIT, Budget


@dataclass(frozen=True)
class ContinuationSpec:
    """Everything needed to create a continuation bundle; stored with its queue row until the run exists."""

    run_id: str
    parent_run_id: str
    node_id: str
    answer: Any
    """The checkpoint's output as the edges after it see it (a decision: ``{choice, provenance, <texts>}``)."""
    human_decision: dict[str, Any] | None = None
    """The redacted decision receipt (``continuedFrom.humanDecision``); ``None`` for a plain checkpoint."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "runId": self.run_id,
            "parentRunId": self.parent_run_id,
            "nodeId": self.node_id,
            "answer": self.answer,
        }
        if self.human_decision is not None:
            data["humanDecision"] = self.human_decision
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ContinuationSpec:
        return cls(
            run_id=str(data["runId"]),
            parent_run_id=str(data["parentRunId"]),
            node_id=str(data["nodeId"]),
            answer=data.get("answer"),
            human_decision=data.get("humanDecision"),
        )


def continued_from(spec: ContinuationSpec) -> dict[str, Any]:
    data: dict[str, Any] = {"runId": spec.parent_run_id, "nodeId": spec.node_id}
    if spec.human_decision is not None:
        data["humanDecision"] = spec.human_decision
    return data


def carried(parent: Bundle, state: RunState, spec: ContinuationSpec) -> dict[str, Any]:
    """``run_started.carried``: the parent's outputs, results, steps and mounts, the gate answered.

    Values are resolved (artifacts loaded) so the new run's writer stores them in its own bundle.
    """
    node_id = spec.node_id
    budget_wait = node_id == BUDGET_WAIT  # a top-up answers no node: the blocked node runs again
    answered = None if budget_wait else state.results.get(node_id)
    outputs = {key: parent.resolve(value) for key, value in state.outputs.items()}
    if not budget_wait:
        outputs[node_id] = spec.answer
    results: dict[str, Any] = {}
    for key, step in state.results.items():
        entry = parent.resolve(result_to_json(step))
        if key == node_id and not budget_wait:
            entry["output"] = spec.answer
        results[key] = entry
    steps: list[dict[str, Any]] = []
    for step in state.steps:
        entry = parent.resolve(step_to_json(step))
        if answered is not None and step.attempt_id == answered.attempt_id:
            entry["output"] = spec.answer
        steps.append(entry)
    data: dict[str, Any] = {"outputs": outputs, "results": results, "steps": steps}
    if state.mounts:
        data["mounts"] = {path: parent.resolve(dict(entry)) for path, entry in state.mounts.items()}
    if state.usage is not None:
        data["usage"] = state.usage
    if state.spent is not None:
        data["spent"] = state.spent  # the budget's ledger carries on: a continuation is charged, never reset
    return data


def continued_budget(state: RunState, spec: ContinuationSpec) -> dict[str, Any] | None:
    """The limits a continuation starts with: the parent's, raised by a budget top-up."""
    if state.budget is None:
        return None
    limits = Budget.from_wire(state.budget)
    if spec.node_id == BUDGET_WAIT and isinstance(spec.answer, dict):
        limits = limits.topped_up(Budget.from_wire(spec.answer.get("topUp") or {}))
    return limits.to_wire()


def blocked_node(parent: Bundle, state: RunState) -> str | None:
    """The node a budget stop refused a request of (it runs again, fresh, in the continuation)."""
    stop = parent.resolve(state.final_output)
    return str(stop["blockedNode"]) if isinstance(stop, dict) and stop.get("blockedNode") else None
