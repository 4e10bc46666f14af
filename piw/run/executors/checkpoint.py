"""Checkpoints: the node records what it waits for; the engine then ends the run ``waiting``.

A plain checkpoint's output is its summary. A ``human_decision`` gate's output is the open request (audience,
request, choices, timeout deadline, digest); its decision id is derived from the run, node and visit index, so
a rerun after a crash finds the same decision, and when a decision book is wired (the run database) the rerun
adopts the recorded request, deadline included, instead of opening a new one (``docs/design/persistence.md`` §10.3).
"""

from __future__ import annotations

from typing import Any, Protocol

from piw.run.channel_posts import QueuedPost
from piw.run.executors import Attempt, NodeOutcome, describe_exception, evaluate, to_json_output
from piw.wire import sha256_hex
from piw.workflow.definition import CheckpointNode
from piw.workflow.gates import opened_request


def decision_id(run_id: str, node_id: str, index: int) -> str:
    return "dec_" + sha256_hex(f"{run_id}/{node_id}/{index}")[:32]


class DecisionBook(Protocol):
    """Where open decisions are recorded (the ``human_decisions`` table); the first request recorded wins."""

    def open_decision(
        self, *, run_id: str, node_id: str, attempt_id: str, decision_id: str, request: dict[str, Any]
    ) -> dict[str, Any]:
        """Record the request unless the decision exists; return the recorded request either way."""
        ...


class PostBook(Protocol):
    """Where an opened gate's channel posts are queued (``piw.run.channel_posts``, ``docs/channels.md``)."""

    def queue(
        self, *, run_id: str, node_id: str, workflow_name: str, request: dict[str, Any]
    ) -> list[QueuedPost]: ...


class CheckpointExecutor:
    def __init__(self, book: DecisionBook | None = None, posts: PostBook | None = None) -> None:
        self.book = book
        self.posts = posts

    def execute(self, attempt: Attempt) -> NodeOutcome:
        node = attempt.gnode.node
        assert isinstance(node, CheckpointNode)
        try:
            gate = node.human_decision
            if gate is None:
                return NodeOutcome.ok(to_json_output(evaluate(node.summary, attempt.ctx), attempt.node_id))
            state = attempt.writer.state
            index = 1 + sum(1 for s in state.steps if s.node_id == attempt.node_id and s.outcome == "ok")
            ident = decision_id(attempt.run_id, attempt.node_id, index)
            request = opened_request(
                gate, attempt.ctx, ident, attempt.ctx.now(), f"Decision {attempt.node_id}"
            )
            if self.book is not None:
                attempt.writer.sync()  # the row is an effect others act on: the trace it follows is durable
                request = self.book.open_decision(
                    run_id=attempt.run_id,
                    node_id=attempt.node_id,
                    attempt_id=attempt.attempt_id,
                    decision_id=ident,
                    request=request,
                )
                if self.posts is not None:
                    self._announce(attempt, request)
            return NodeOutcome.ok(request)
        except Exception as exc:
            return NodeOutcome.failed(describe_exception(exc), exception=exc)

    def _announce(self, attempt: Attempt, request: dict[str, Any]) -> None:
        """Queue the gate's channel posts, then ``notification_queued`` once per post (a rerun finds both)."""
        assert self.posts is not None
        writer = attempt.writer
        for post in self.posts.queue(
            run_id=attempt.run_id,
            node_id=attempt.node_id,
            workflow_name=writer.state.workflow_name,
            request=request,
        ):
            if writer.notification_queued(post.post_id):
                continue
            writer.append(
                "node",
                "notification_queued",
                {
                    "notificationId": post.post_id,
                    "runId": attempt.run_id,
                    "kind": "channel",
                    "channel": post.channel,
                    "channelKind": post.kind,
                    "decisionId": request.get("decisionId"),
                },
                node_id=attempt.node_id,
                attempt_id=attempt.attempt_id,
                sync=True,
            )
