"""What a resume does with an interrupted ``once`` or ``reconcile`` effect, and how ``piw resolve`` answers one.

A ``retry`` action that a crash interrupted simply reruns (``docs/design/persistence.md`` §8 step 5). An attempt whose
``effect_started`` is committed without its terminal event is different when its node's class says so:

- ``once``: nobody knows whether the effect happened, so nothing is rerun. The run writes
  ``effect_outcome_unknown`` (status ``unknown``) and parks with ``park_reason = "outcome_unknown"``, which no host
  claims; ``piw resolve RUN done|retry|skip`` writes ``effect_resolved`` and continues: ``done`` finishes the
  attempt with the output a person gives, ``skip`` finishes it with ``null``, ``retry`` reruns the node (the same
  ``ctx.idempotency_key``: an API that deduplicates still sees one request).
- ``reconcile``: piw calls the node's ``check(ctx)`` once and records what it found (``effect_reconciled``): an
  output finishes the attempt, ``None`` reruns the node. A check that raises parks the run as for ``once``.

See ``docs/effects.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal

from piw.errors import NotOutcomeUnknown, OutcomeUnknown
from piw.run.executors import describe_exception, to_json_output
from piw.store.state import CurrentAttempt, RunState
from piw.wire import now_iso, parse_time
from piw.workflow.definition import ActionNode
from piw.workflow.user_code import call_user

if TYPE_CHECKING:
    from piw.run.step import StepLoop

Resolution = Literal["done", "retry", "skip"]
RESOLUTIONS: tuple[Resolution, ...] = ("done", "retry", "skip")
PARK_REASON: Final = "outcome_unknown"


def resolve_hint(run_id: str) -> str:
    return f"piw resolve {run_id} done|retry|skip"


def refuse_unknown(state: RunState, resolution: dict[str, Any] | None) -> None:
    """A run whose outcome is unknown continues only through ``piw resolve``; ``piw resolve`` only on such a run."""
    if resolution is None and state.status == "unknown":
        unresolved = state.unresolved or {}
        raise OutcomeUnknown(
            f"Run {state.run_id} is parked: the outcome of {unresolved.get('nodeId')} (effect 'once') is unknown. "
            f"Check whether it happened, then answer with '{resolve_hint(state.run_id)}'."
        )
    if resolution is not None and state.status != "unknown":
        raise NotOutcomeUnknown(
            f"Run {state.run_id} has no unresolved effect (status {state.status}); nothing was changed. "
            f"'piw resolve' answers a run whose status is unknown (see 'piw runs --status unknown')."
        )


def recover_effect(steps: StepLoop, current: CurrentAttempt, resumed: dict[str, Any]) -> bool:
    """Handle an in-progress attempt whose ``once``/``reconcile`` effect started; ``False``: rerun it as usual."""
    effect = current.effect
    gnode = steps.graph.nodes.get(current.node_id)
    if effect is None or gnode is None or not isinstance(gnode.node, ActionNode):
        return False
    node = gnode.node
    if node.effect_class == "once":
        park_unknown(steps, current, resumed)
        return True
    if node.effect_class != "reconcile" or node.check is None:
        return False
    reconciled = effect.get("reconciled")
    if reconciled is None:
        ctx = steps.context(current.node_id, current.attempt_id)
        try:
            value = call_user(node.check, ctx)
            output = None if value is None else to_json_output(value, current.node_id)
        except Exception as exc:
            park_unknown(steps, current, resumed, reason=f"check failed: {describe_exception(exc)}")
            return True
        found = output is not None
        payload: dict[str, Any] = {"found": found, **({"output": output} if found else {})}
        _record(steps, current, "effect_reconciled", payload)
    else:  # reconciled before a second crash: what the check found then stands (it is asked once)
        found = bool(reconciled.get("found"))
        output = steps.run.resolve(reconciled.get("output"))
    if found:
        _finish(steps, current, resumed, output, {"reconciled": True})
    else:
        _rerun(steps, current, resumed)
    return True


def park_unknown(
    steps: StepLoop, current: CurrentAttempt, resumed: dict[str, Any], reason: str | None = None
) -> None:
    """Record that the effect's outcome is unknown and park the run for a person (``piw resolve``)."""
    effect = current.effect or {}
    payload: dict[str, Any] = {
        "effect": effect.get("effect", "once"),
        "effectStartedAt": effect.get("startedAt"),
    }
    for key in ("idempotencyKey", "actionType", "command", "args"):
        if effect.get(key) is not None:
            payload[key] = effect[key]
    if reason:
        payload["reason"] = reason
    if resumed.get("killedProcessGroup"):
        payload["killedProcessGroup"] = resumed["killedProcessGroup"]
    _record(steps, current, "effect_outcome_unknown", payload)
    steps.control.stopped = PARK_REASON  # claimers skip the row until 'piw resolve'


def apply_resolution(steps: StepLoop, resolution: dict[str, Any] | None) -> None:
    """``piw resolve``: record the person's answer for the unresolved effect, then continue the run.

    Without an answer (refused before the claim; a host that got here anyway) the run is parked again."""
    if resolution is None:
        steps.control.stopped = PARK_REASON
        return
    writer = steps.run.writer
    state = writer.state
    unresolved = state.unresolved or {}
    current = state.current
    if current is None or current.attempt_id != unresolved.get("attemptId"):
        raise NotOutcomeUnknown(f"Run {state.run_id} has no unresolved attempt; nothing was changed.")
    answer: Resolution = resolution["resolution"]
    payload: dict[str, Any] = {"resolution": answer}
    if answer == "done" and resolution.get("output") is not None:
        payload["output"] = resolution["output"]
    _record(steps, current, "effect_resolved", payload)
    resumed: dict[str, Any] = {"replayedSteps": len(state.steps)}
    if answer == "retry":
        _rerun(steps, current, resumed)
        return
    output = resolution.get("output") if answer == "done" else None
    _finish(steps, current, resumed, output, {"resolution": answer})


def _record(steps: StepLoop, current: CurrentAttempt, event_type: str, payload: dict[str, Any]) -> None:
    """A node event of the interrupted attempt, written durably (``sync``) before the run acts on it."""
    steps.run.writer.append(
        "node", event_type, payload, node_id=current.node_id, attempt_id=current.attempt_id, sync=True
    )


def _rerun(steps: StepLoop, current: CurrentAttempt, resumed: dict[str, Any]) -> None:
    resumed.update(resumeAt=current.node_id, abandonedAttemptId=current.attempt_id)
    steps.run.writer.append("run", "run_resumed", resumed, sync=True)
    steps.loop(current.node_id)


def _finish(
    steps: StepLoop, current: CurrentAttempt, resumed: dict[str, Any], output: Any, how: dict[str, Any]
) -> None:
    """End the interrupted attempt ``ok`` with ``output`` (no rerun), then route on as after any step."""
    writer = steps.run.writer
    resumed.update(resumeAt=current.node_id, reattachedAttemptId=current.attempt_id)
    writer.append("run", "run_resumed", resumed, sync=True)
    effect = current.effect or {}
    action = {"actionType": effect.get("actionType", "function"), **how}
    for key in ("command", "args", "cwd"):
        if effect.get(key) is not None:
            action[key] = effect[key]
    started = parse_time(current.started_at)
    duration = max(0, int((parse_time(now_iso()) - started).total_seconds() * 1000))
    payload = {"outcome": "ok", "durationMs": duration, "output": output, "action": action}
    _record(steps, current, "node_finished", payload)
    committed = writer.state.results.get(current.node_id)
    decision = steps.route_after(current.node_id, "ok", committed.output if committed else None, None)
    next_node = steps.apply(decision)
    if next_node is not None:
        steps.loop(next_node)
