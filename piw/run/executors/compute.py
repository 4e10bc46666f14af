"""Compute nodes: a pure function of the context, run inline."""

from __future__ import annotations

from piw.errors import NodeFailure
from piw.run.executors import Attempt, NodeOutcome, describe_exception, evaluate, to_json_output
from piw.workflow.definition import ComputeNode


class ComputeExecutor:
    def execute(self, attempt: Attempt) -> NodeOutcome:
        node = attempt.gnode.node
        assert isinstance(node, ComputeNode)
        try:
            return NodeOutcome.ok(to_json_output(evaluate(node.run, attempt.ctx), attempt.node_id))
        except NodeFailure as exc:
            return NodeOutcome.failed(str(exc), exc.outcome, exception=exc)
        except Exception as exc:
            return NodeOutcome.failed(describe_exception(exc), exception=exc)
