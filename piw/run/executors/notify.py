"""Notify nodes: a durable message to the origin session, exactly once per node execution.

The index counts this node's ``ok`` steps, so a rerun after a crash reuses the same notification id; the
conversation entry and ``notification_queued`` are each written at most once for that id.
"""

from __future__ import annotations

from typing import Any

from piw.run.executors import Attempt, NodeOutcome, describe_exception, evaluate
from piw.wire import sha256_hex
from piw.workflow.definition import NotifyNode

NOTIFICATION_CUSTOM_TYPE = "pi-workflows-notification"


def notification_id(run_id: str, node_id: str, index: int) -> str:
    return "ntf_" + sha256_hex(f"{run_id}/{node_id}/{index}")[:32]


class NotifyExecutor:
    def execute(self, attempt: Attempt) -> NodeOutcome:
        node = attempt.gnode.node
        assert isinstance(node, NotifyNode)
        try:
            text = evaluate(node.message, attempt.ctx)
        except Exception as exc:
            return NodeOutcome.failed(describe_exception(exc), exception=exc)
        if not isinstance(text, str):
            return NodeOutcome.failed(
                f"Notify {attempt.node_id}: message must be a string, got {type(text).__name__}."
            )
        writer = attempt.writer
        index = 1 + sum(1 for s in writer.state.steps if s.node_id == attempt.node_id and s.outcome == "ok")
        ident = notification_id(attempt.run_id, attempt.node_id, index)
        existing = attempt.session.find_custom(NOTIFICATION_CUSTOM_TYPE, "notificationId", ident)
        if existing is None:
            existing = attempt.session.append(
                {
                    "role": "custom",
                    "customType": NOTIFICATION_CUSTOM_TYPE,
                    "content": text,
                    "details": {"notificationId": ident, "notificationIndex": index, "kind": node.kind},
                }
            )
        content = existing.message.get("content", text)
        target = attempt.origin_session_id
        if not attempt.writer.notification_queued(ident):
            payload: dict[str, Any] = {
                "notificationId": ident,
                "notificationIndex": index,
                "kind": node.kind,
                "contentSha256": "sha256:" + sha256_hex(content),
            }
            if target:
                payload["targetSessionId"] = target
            writer.append("node", "notification_queued", payload, node_id=attempt.node_id,
                          attempt_id=attempt.attempt_id, sync=True)  # fmt: skip
        return NodeOutcome.ok({"notificationId": ident, "targetSessionId": target})
