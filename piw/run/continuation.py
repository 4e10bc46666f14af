"""Checkpoint continuations: what a new run carries from the waiting run it continues
(``docs/design/persistence.md`` §8).

A waiting run is final; an answer starts a NEW bundle whose ``run_started`` names the parent
(``continuedFrom``) and carries the parent's outputs, results, steps and include state, with the checkpoint's
output replaced by the answer, so the edges after the gate (and ``ctx.outputs``) see the answer. Steps carried
count against ``maxSteps``. The update projection is not carried: it starts empty. Carried values are read with
their artifacts resolved and externalized again by the new run's writer, which copies every referenced artifact
into the new bundle (content-addressed, so the files are identical).

Which steps a continuation may still run (:func:`steps_ahead`) decides whether it needs a provider at all: only an
agent step ahead does (``docs/checkpoints.md``), so ``piw answer`` refuses before recording when none can be
found for one, and a gate followed by compute steps only is continued with no provider.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piw.errors import ProviderError
from piw.store.bundle import Bundle, load_state, open_bundle
from piw.store.fold import RunState, result_to_json, step_to_json
from piw.workflow.budget import BUDGET_WAIT, Budget
from piw.workflow.definition import ActionNode, AgentNode
from piw.workflow.graph import FlatGraph, successors
from piw.workflow.routing import decide

if TYPE_CHECKING:
    from piw.run.executors import Executor
    from piw.store.db.rows import QueueRow
    from piw.workflow.loader import LoadedWorkflow

ExecutorFactory = Callable[["LoadedWorkflow"], "Executor | None"]


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


# ---- the steps ahead of a continuation ------------------------------------------------------------------------


@dataclass(frozen=True)
class Ahead:
    """The model-asking steps a continuation may run: agent steps, and actions (which may call ``ctx.run_agent``)."""

    agents: tuple[str, ...]
    actions: tuple[str, ...]

    def describe(self) -> str:
        """``agent step after`` / ``agent steps a, b``: what asks a model after the gate."""
        names = self.agents
        return f"agent step{'s' if len(names) != 1 else ''} {', '.join(names)}"


def steps_ahead(graph: FlatGraph, parent: Bundle, state: RunState, spec: ContinuationSpec) -> set[str]:
    """Every node a continuation may reach: from where the answer routes (a top-up: the stopped step), on along
    every edge (each branch a later step may take)."""
    if spec.node_id == BUDGET_WAIT:
        blocked = blocked_node(parent, state)
        start = [blocked] if blocked else []
    else:
        routed = decide(graph, state, spec.node_id, "ok", spec.answer, None)
        target = routed.target
        while target is not None and target in graph.mounts:
            target = graph.mounts[target].start
        start = [target] if routed.terminal is None and target is not None else []
    seen = set(start)
    todo = list(start)
    while todo:
        for after in successors(graph, todo.pop()):
            if after not in seen:
                seen.add(after)
                todo.append(after)
    return seen


def ahead_of(workflow: LoadedWorkflow, parent: Bundle, state: RunState, spec: ContinuationSpec) -> Ahead:
    """The agent steps and actions among :func:`steps_ahead`, in the graph's order."""
    reach = steps_ahead(workflow.graph, parent, state, spec)
    nodes = [gnode for node_id, gnode in workflow.graph.nodes.items() if node_id in reach]
    return Ahead(
        agents=tuple(gnode.id for gnode in nodes if isinstance(gnode.node, AgentNode)),
        actions=tuple(gnode.id for gnode in nodes if isinstance(gnode.node, ActionNode)),
    )


def continuation_executors(
    factory: ExecutorFactory | None, home: Path, spec: ContinuationSpec
) -> ExecutorFactory:
    """``factory`` as a continuation uses it: not called when no step ahead asks a model, and a provider that
    cannot be built only fails the continuation when an agent step is ahead (actions then have none, as in a
    workflow of actions only)."""

    def build(workflow: LoadedWorkflow) -> Executor | None:
        if factory is None:
            return None
        parent = open_bundle(home, spec.parent_run_id)
        ahead = ahead_of(workflow, parent, load_state(parent), spec)
        if ahead.agents:
            return factory(workflow)
        if ahead.actions:
            try:
                return factory(workflow)
            except ProviderError:
                return None
        return None

    return build


def check_continuation(
    workflow: LoadedWorkflow,
    parent: Bundle,
    state: RunState,
    spec: ContinuationSpec,
    factory: ExecutorFactory,
) -> None:
    """Before an answer is recorded: the provider an agent step ahead needs can be built (then released).

    ``ProviderError`` says which steps need it and that nothing was recorded (``docs/cli.md``, exit 2).
    """
    ahead = ahead_of(workflow, parent, state, spec)
    if not ahead.agents:
        return
    try:
        executor = factory(workflow)
    except ProviderError as exc:
        raise ProviderError(
            f"The continuation of run {spec.parent_run_id} runs {ahead.describe()}, which needs a provider: {exc} "
            "Nothing was recorded."
        ) from None
    close = getattr(executor, "close", None)
    if callable(close):
        close()


def spec_of(row: QueueRow) -> ContinuationSpec | None:
    """The continuation a queue row holds (an answer recorded it as the row's input), if it is one."""
    raw = row.input.get("continuation") if row.parent_run_id and isinstance(row.input, dict) else None
    return ContinuationSpec.from_json(raw) if isinstance(raw, dict) else None


def pickup_note(row: QueueRow) -> str:
    """What a host says when it claims a continuation: which run's answer it continues (``docs/cli.md``)."""
    spec = spec_of(row)
    if spec is None:
        return ""
    where = "its budget top-up" if spec.node_id == BUDGET_WAIT else f"the answer at {spec.node_id}"
    return f": the continuation of {spec.parent_run_id} after {where}"
