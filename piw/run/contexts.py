"""The context a step's workflow code sees: the run's input, earlier outputs and results, ids and, for an
action, its effects (updates, ``ctx.run_agent``, cooperative cancellation and the engine clock).

Everything comes from the folded state of the open run, scoped to the step's include invocation; values are
read with their artifact refs resolved only when the code reads them (``LazyOutputs``).
"""

from __future__ import annotations

from typing import Any

from piw.run.executors import Attempt, Executor
from piw.run.open_run import OpenRun
from piw.run.options import RunOptions
from piw.store.fold import RunState, result_to_json
from piw.workflow.context import ActionContext, LazyOutputs, NodeContext
from piw.workflow.definition import ActionNode
from piw.workflow.effects import idempotency_key
from piw.workflow.graph import FlatGraph


def node_context(
    run: OpenRun,
    graph: FlatGraph,
    options: RunOptions,
    agent: Executor,
    node_id: str,
    attempt_id: str,
    holder: list[Attempt] | None = None,
) -> NodeContext:
    """The context of ``node_id``'s attempt; an action's reaches its attempt through ``holder`` once it exists."""
    state = run.state
    mount = graph.mount_of(node_id)
    if mount is None:
        raw_input = state.input
        outputs = {k: v for k, v in state.outputs.items() if "/" not in k}
        results = {k: result_to_json(v) for k, v in state.results.items() if "/" not in k}
    else:
        entry = state.mounts.get(mount.path, {})
        raw_input = entry.get("input")
        outputs, results = _scoped(state, mount.path, int(entry.get("stepIndex", 0)))
    common: dict[str, Any] = {
        "input": run.resolve(raw_input),
        "outputs": LazyOutputs(outputs, run.resolve),
        "results": results,
        "run_id": run.run_id,
        "node_id": node_id,
        "attempt_id": attempt_id,
        "workflow_name": state.workflow_name,
        "clock": options.clock,
    }
    gnode = graph.nodes.get(node_id)
    if gnode is not None and isinstance(gnode.node, ActionNode):
        holder_ref = holder if holder is not None else []

        def publish(type_: str, key: str, data: Any) -> Any:
            attempt = holder_ref[0] if holder_ref else None
            return run.publisher.publish(
                node_id,
                attempt_id,
                {"type": type_, "key": key, "data": data},
                is_active=attempt.is_live if attempt else None,
            )

        def run_agent(prompt: str, **kwargs: Any) -> Any:
            attempt = holder_ref[0] if holder_ref else None
            make_runner = getattr(agent, "child_runner", None)
            if attempt is None or make_runner is None:
                raise RuntimeError("ctx.run_agent needs a model provider; run with --provider NAME.")
            return attempt.child_runner(make_runner)(prompt, **kwargs)

        def fan_out(children: int) -> int:  # ctx.start_fan_out: the budget's fan-out gate (docs/planning.md)
            attempt = holder_ref[0] if holder_ref else None
            make_runner = getattr(agent, "child_runner", None)
            if attempt is None or make_runner is None:
                return children
            return int(attempt.child_runner(make_runner).fan_out(children))

        def runner() -> Any:  # the attempt's child runner: a script reads its committed leaves from it
            attempt = holder_ref[0] if holder_ref else None
            make_runner = getattr(agent, "child_runner", None)
            return attempt.child_runner(make_runner) if attempt is not None and make_runner else None

        run_agent.fan_out = fan_out  # type: ignore[attr-defined]
        run_agent.runner = runner  # type: ignore[attr-defined]
        extra: dict[str, Any] = {"waiter": options.waiter} if options.waiter else {}
        visit = state.node_stats.get(node_id, (0, 0.0))[0] + 1  # an abandoned attempt ends no visit
        key = idempotency_key(run.run_id, node_id, visit)
        return ActionContext(
            **common, publisher=publish, agent_runner=run_agent, idempotency_key=key, **extra
        )
    return NodeContext(**common)


def _scoped(state: RunState, mount_path: str, start: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Outputs and results of the current invocation of a mount, keyed by local id."""
    prefix = mount_path + "/"
    outputs: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for step in state.steps[start:]:
        rest = step.node_id[len(prefix) :] if step.node_id.startswith(prefix) else None
        if rest is None or "/" in rest:
            continue
        results[rest] = result_to_json(step)
        if step.outcome == "ok":
            outputs[rest] = step.output
        else:
            outputs.pop(rest, None)
    for key, value in state.outputs.items():
        rest = key[len(prefix) :] if key.startswith(prefix) else None
        if (
            rest
            and "/" not in rest
            and key in state.mounts
            and int(state.mounts[key].get("stepIndex", 0)) >= start
        ):
            outputs[rest] = value
    return outputs, results
