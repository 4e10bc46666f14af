"""Queuing a gate's channel posts when it opens (``docs/channels.md``, "Exactly one post per wait").

The checkpoint executor calls the book right after the decision row is recorded: for every channel the gate's
audience or workflow chooses, one ``channel_posts`` row keyed by ``(decision_id, channel)`` (inserted unless
present), then one ``notification_queued`` event per post in the trace, written once. A crash between the two
leaves the row; the rerun finds it and writes the event, so the person is told once. Sending is not done here:
it is a duty of ``piw host`` and of the foreground ``piw run`` (``piw.channels.duty``), after the run is
waiting, so a gate whose run is interrupted before it is waiting posts nothing yet.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueuedPost:
    post_id: str
    channel: str
    kind: str


class ChannelPostBook:
    """The posts of opened gates, for one home; the channels config is read when a gate opens."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def queue(
        self, *, run_id: str, node_id: str, workflow_name: str, request: dict[str, Any]
    ) -> list[QueuedPost]:
        from piw.config.channels import chosen
        from piw.config.settings import load_config
        from piw.store.db.channels import open_channel_store

        try:
            channels = load_config(self.home).channels
        except Exception as exc:  # a broken config.toml is reported by the commands that need it
            log.warning("channels not read: %s", exc)
            return []
        names = chosen(channels, workflow_name, str(request.get("audience", "")))
        if not names:
            return []
        store = open_channel_store(self.home)
        queued = []
        for name in names:
            row = store.queue_post(
                decision_id=str(request["decisionId"]),
                run_id=run_id,
                node_id=node_id,
                channel=name,
                request_sha256=str(request.get("requestSha256", "")),
            )
            queued.append(QueuedPost(row.post_id, name, channels[name].kind))
        return queued


def channel_posts(home: Path, decisions: object | None) -> ChannelPostBook | None:
    """The engine's post book: only where decisions are recorded in a run database (posts live beside them)."""
    return ChannelPostBook(home) if decisions is not None else None
