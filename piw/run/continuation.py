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
from piw.store.replay import RunState, result_to_json, step_to_json


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
    answered = state.results.get(node_id)
    outputs = {key: parent.resolve(value) for key, value in state.outputs.items()}
    outputs[node_id] = spec.answer
    results: dict[str, Any] = {}
    for key, step in state.results.items():
        entry = parent.resolve(result_to_json(step))
        if key == node_id:
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
    return data
