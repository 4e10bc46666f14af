"""Function actions: user code with side effects, run under the node deadline."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from piw.errors import Cancelled, NodeFailure
from piw.run.executors import Attempt, NodeOutcome, describe_exception, run_with_deadline, to_json_output
from piw.run.executors.effect_start import mark_effect_start
from piw.workflow.definition import ActionNode


class FunctionActionExecutor:
    def execute(self, attempt: Attempt) -> NodeOutcome:
        node = attempt.gnode.node
        assert isinstance(node, ActionNode) and node.run is not None
        run = node.run
        started = time.monotonic()
        attempt.writer.sync()  # every line the effect depends on is durable before it starts
        mark_effect_start(attempt, {"actionType": "function"})  # once/reconcile: the start is durable first
        status, value = run_with_deadline(attempt, lambda: run(attempt.ctx))  # type: ignore[arg-type]
        receipt = {"actionType": "function", "durationMs": int((time.monotonic() - started) * 1000)}
        outcome = self._outcome(attempt, status, value, receipt)
        if attempt.usage is not None:
            outcome = replace(outcome, usage=attempt.usage)
        return outcome

    def _outcome(self, attempt: Attempt, status: str, value: Any, receipt: dict[str, Any]) -> NodeOutcome:
        if status == "timed_out":
            return NodeOutcome.failed(
                f"Action {attempt.node_id} timed out after {attempt.timeout_s:g}s.",
                "timed_out",
                action=receipt,
            )
        if status == "cancelled" or (isinstance(value, Cancelled) and attempt.cancel.is_set()):
            return NodeOutcome.failed(f"Action {attempt.node_id} was cancelled.", "cancelled", action=receipt)
        if status == "error":
            if isinstance(value, NodeFailure):
                return NodeOutcome.failed(str(value), value.outcome, action=receipt, exception=value)
            return NodeOutcome.failed(describe_exception(value), action=receipt, exception=value)
        try:
            return NodeOutcome.ok(to_json_output(value, attempt.node_id), action=receipt)
        except NodeFailure as exc:
            return NodeOutcome.failed(str(exc), action=receipt)
