"""Checkpoints: the node records what it waits for; the engine then ends the run ``waiting``."""

from __future__ import annotations

from piw.run.executors import Attempt, NodeOutcome, describe_exception, evaluate, to_json_output
from piw.workflow.definition import CheckpointNode


class CheckpointExecutor:
    def execute(self, attempt: Attempt) -> NodeOutcome:
        node = attempt.gnode.node
        assert isinstance(node, CheckpointNode)
        try:
            gate = node.human_decision
            if gate is not None:
                request = evaluate(gate.request, attempt.ctx)
                output = {"audience": gate.audience, "choices": list(gate.choices), "request": str(request)}
            else:
                output = evaluate(node.summary, attempt.ctx)
            return NodeOutcome.ok(to_json_output(output, attempt.node_id))
        except Exception as exc:
            return NodeOutcome.failed(describe_exception(exc), exception=exc)
