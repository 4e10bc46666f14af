"""The notification outbox in ``piw.sqlite`` (``persistence.md`` §10.3): exactly one row per node execution.

A notify node inserts its row with ``INSERT OR IGNORE`` and reads it back (the first content wins, so a rerun
after a crash reuses it), before it writes the conversation entry and ``notification_queued``. Consumers take a
30 s delivery lease on undelivered rows, deliver, then set ``delivered_at``; a lease that expires is taken again
(redelivery) and consumers deduplicate by notification id. The origin session's process delivers the rows of
its run; a host delivers rows with no target session; read-only viewers never touch the outbox. Delivery never
writes the trace.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from piw.store.db.queue import SqliteQueue

DELIVERY_LEASE_MS = 30_000


@dataclass(frozen=True)
class NewNotification:
    notification_id: str
    run_id: str
    node_id: str
    attempt_id: str
    notification_index: int
    kind: str
    target_session_id: str | None
    content: str
    content_sha256: str


@dataclass(frozen=True)
class NotificationRow:
    """One outbox row; ``delivery_token`` is set while a consumer holds its lease."""

    notification_id: str
    run_id: str
    node_id: str
    attempt_id: str | None
    notification_index: int
    kind: str
    target_session_id: str | None
    content: str
    content_sha256: str | None
    created_at: int | None
    delivery_token: str | None
    delivery_expires_at: int | None
    delivered_at: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "notificationId": self.notification_id,
            "runId": self.run_id,
            "nodeId": self.node_id,
            "notificationIndex": self.notification_index,
            "kind": self.kind,
            "targetSessionId": self.target_session_id,
            "content": self.content,
            "deliveredAt": self.delivered_at,
        }


_COLUMNS = (
    "notification_id, run_id, node_id, attempt_id, notification_index, kind, target_session_id, content, "
    "content_sha256, created_at, delivery_token, delivery_expires_at, delivered_at"
)


def _row(values: tuple[Any, ...]) -> NotificationRow:
    return NotificationRow(*values)


def queue_notification(queue: SqliteQueue, item: NewNotification) -> NotificationRow:
    """Insert unless the id (or its run/node/index) exists; return the recorded row (the first content wins)."""
    now = queue.clock()
    with queue.db.transaction() as conn:
        conn.execute(
            f"INSERT OR IGNORE INTO notifications ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)",
            (
                item.notification_id,
                item.run_id,
                item.node_id,
                item.attempt_id,
                item.notification_index,
                item.kind,
                item.target_session_id,
                item.content,
                item.content_sha256,
                now,
            ),
        )
        found = conn.execute(
            f"SELECT {_COLUMNS} FROM notifications WHERE notification_id = ? OR "
            "(run_id = ? AND node_id = ? AND notification_index = ?)",
            (item.notification_id, item.run_id, item.node_id, item.notification_index),
        ).fetchone()
    return _row(found)


def notifications_of(queue: SqliteQueue, run_id: str) -> list[NotificationRow]:
    found = queue.db.connection().execute(
        f"SELECT {_COLUMNS} FROM notifications WHERE run_id = ? ORDER BY created_at, notification_id",
        (run_id,),
    )
    return [_row(values) for values in found.fetchall()]


def lease_notifications(
    queue: SqliteQueue,
    *,
    run_id: str | None = None,
    untargeted: bool = False,
    only: Collection[str] | None = None,
    limit: int = 100,
) -> list[NotificationRow]:
    """Take the delivery lease of undelivered rows nobody holds: the rows of ``run_id`` that have a target session
    (for its origin session's process), or, with ``untargeted``, rows with no target session (for a host). Each
    gets its own token. ``only`` restricts it to those notification ids."""
    now = queue.clock()
    where = "delivered_at IS NULL AND (delivery_expires_at IS NULL OR delivery_expires_at <= ?)"
    params: list[Any] = [now]
    if run_id is not None:
        where += " AND run_id = ?"
        params.append(run_id)
    if untargeted:
        where += " AND target_session_id IS NULL"
    elif run_id is not None:
        where += " AND target_session_id IS NOT NULL"
    if only is not None:
        if not only:
            return []
        where += f" AND notification_id IN ({','.join('?' * len(only))})"
        params.extend(only)
    taken: list[NotificationRow] = []
    with queue.db.transaction() as conn:
        found = conn.execute(
            f"SELECT notification_id FROM notifications WHERE {where} ORDER BY created_at, notification_id LIMIT ?",
            (*params, limit),
        ).fetchall()
        for (ident,) in found:
            token = secrets.token_hex(16)
            conn.execute(
                "UPDATE notifications SET delivery_token = ?, delivery_expires_at = ? WHERE notification_id = ?",
                (token, now + DELIVERY_LEASE_MS, ident),
            )
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM notifications WHERE notification_id = ?", (ident,)
            ).fetchone()
            taken.append(_row(row))
    return taken


def mark_delivered(queue: SqliteQueue, notification_id: str, token: str) -> bool:
    """Set ``delivered_at`` if this consumer still holds the lease (an expired one may have been taken again)."""
    now = queue.clock()
    with queue.db.transaction() as conn:
        cursor = conn.execute(
            "UPDATE notifications SET delivered_at = ?, delivery_token = NULL, delivery_expires_at = NULL "
            "WHERE notification_id = ? AND delivery_token = ? AND delivered_at IS NULL",
            (now, notification_id, token),
        )
        return cursor.rowcount == 1
