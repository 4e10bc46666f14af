"""Notify nodes: a durable message to the origin session, exactly once per node execution.

The index counts this node's ``ok`` steps, so a rerun after a crash reuses the same notification id. The order
is ``docs/design/persistence.md`` §10.3's: the outbox row (``INSERT OR IGNORE``, read back: the first content
wins), then the conversation entry, then ``notification_queued``, then ``node_finished``; each is written at
most once for that id, so a crash between any two of them leaves one row, one entry and one event after the
rerun. The entry's details, the event's payload and the node's output all name the run (``runId``), so none of
them needs the envelope it came in to be traced back (``docs/bundle-format.md``).
"""

from __future__ import annotations

from typing import Any, Protocol

from piw.run.executors import Attempt, NodeOutcome, describe_exception, evaluate
from piw.store.db.outbox import NewNotification, NotificationRow
from piw.wire import sha256_hex
from piw.workflow.definition import NotifyNode

NOTIFICATION_CUSTOM_TYPE = "pi-workflows-notification"


def notification_id(run_id: str, node_id: str, index: int) -> str:
    return "ntf_" + sha256_hex(f"{run_id}/{node_id}/{index}")[:32]


class Outbox(Protocol):
    """Where notifications wait for delivery (the ``notifications`` table)."""

    def queue_notification(self, item: NewNotification) -> NotificationRow: ...


class NotifyExecutor:
    def __init__(self, outbox: Outbox | None = None) -> None:
        self.outbox = outbox

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
        target = attempt.origin_session_id
        if self.outbox is not None:
            writer.sync()  # the row is an effect a consumer acts on: what it follows is durable first
            row = self.outbox.queue_notification(
                NewNotification(
                    notification_id=ident,
                    run_id=attempt.run_id,
                    node_id=attempt.node_id,
                    attempt_id=attempt.attempt_id,
                    notification_index=index,
                    kind=node.kind,
                    target_session_id=target,
                    content=text,
                    content_sha256="sha256:" + sha256_hex(text),
                )
            )
            text, target = row.content, row.target_session_id
        existing = attempt.session.find_custom(NOTIFICATION_CUSTOM_TYPE, "notificationId", ident)
        if existing is None:
            existing = attempt.session.append(
                {
                    "role": "custom",
                    "customType": NOTIFICATION_CUSTOM_TYPE,
                    "content": text,
                    "details": {
                        "notificationId": ident,
                        "notificationIndex": index,
                        "kind": node.kind,
                        "runId": attempt.run_id,
                    },
                }
            )
        content = existing.message.get("content", text)
        if not attempt.writer.notification_queued(ident):
            payload: dict[str, Any] = {
                "notificationId": ident,
                "runId": attempt.run_id,
                "notificationIndex": index,
                "kind": node.kind,
                "contentSha256": "sha256:" + sha256_hex(content),
            }
            if target:
                payload["targetSessionId"] = target
            writer.append(
                "node",
                "notification_queued",
                payload,
                node_id=attempt.node_id,
                attempt_id=attempt.attempt_id,
                sync=True,
            )
        return NodeOutcome.ok({"notificationId": ident, "runId": attempt.run_id, "targetSessionId": target})
