"""The notification outbox in the run database: exactly one row per node execution (``docs/detached.md``).

A notify node inserts its row with ``INSERT OR IGNORE`` and reads it back (the first content wins, so a rerun
after a crash reuses it), before it writes the conversation entry and ``notification_queued``. Consumers take a
30 s delivery lease on undelivered rows, deliver, then set ``delivered_at``; a lease that expires is taken again
(redelivery) and consumers deduplicate by notification id. The origin session's process delivers the rows of
its run; a host delivers rows with no target session; read-only viewers never touch the outbox. Delivery never
writes the trace.

:class:`Outbox` is the protocol, :class:`SqliteOutbox` its implementation over ``piw.sqlite``.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from piw.store.db.database import Clock, Database, now_ms
from piw.store.db.dialect import SQLITE, Dialect

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
    "notification_id",
    "run_id",
    "node_id",
    "attempt_id",
    "notification_index",
    "kind",
    "target_session_id",
    "content",
    "content_sha256",
    "created_at",
    "delivery_token",
    "delivery_expires_at",
    "delivered_at",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM notifications"


class Outbox(Protocol):
    """Where notifications wait for delivery."""

    clock: Clock

    def queue_notification(self, item: NewNotification) -> NotificationRow:
        """Insert unless present, then read back: the first content recorded for a notification id wins."""
        ...

    def notifications_of(self, run_id: str) -> list[NotificationRow]: ...

    def lease_for_run(
        self, run_id: str, only: Collection[str] | None = None, limit: int = 100
    ) -> list[NotificationRow]:
        """Take a 30 s delivery lease on the undelivered rows of ``run_id`` that have a target session (its origin
        session's process delivers them); ``only``: just those notification ids."""
        ...

    def lease_untargeted(self, limit: int = 100) -> list[NotificationRow]:
        """Take a 30 s delivery lease on undelivered rows with no target session (a host delivers them)."""
        ...

    def mark_delivered(self, notification_id: str, token: str) -> bool:
        """Set ``delivered_at`` if this consumer still holds the lease."""
        ...


class SqliteOutbox:
    """:class:`Outbox` over the ``notifications`` table of ``piw.sqlite``."""

    dialect: ClassVar[Dialect] = SQLITE

    def __init__(self, db: Database, clock: Clock = now_ms) -> None:
        self.db = db
        self.clock = clock

    def queue_notification(self, item: NewNotification) -> NotificationRow:
        now = self.clock()
        sql = self.dialect.sql
        with self.db.transaction() as conn:
            conn.execute(
                self.dialect.insert("notifications", _COLUMNS, ignore=True),
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
                    None,
                    None,
                    None,
                ),
            )
            found = conn.execute(
                sql(
                    f"{_SELECT} WHERE notification_id = ? OR (run_id = ? AND node_id = ? AND notification_index = ?)"
                ),
                (item.notification_id, item.run_id, item.node_id, item.notification_index),
            ).fetchone()
        return NotificationRow(*found)

    def notifications_of(self, run_id: str) -> list[NotificationRow]:
        found = self.db.connection().execute(
            self.dialect.sql(f"{_SELECT} WHERE run_id = ? ORDER BY created_at, notification_id"), (run_id,)
        )
        return [NotificationRow(*values) for values in found.fetchall()]

    def lease_for_run(
        self, run_id: str, only: Collection[str] | None = None, limit: int = 100
    ) -> list[NotificationRow]:
        if only is not None and not only:
            return []
        where, params = " AND run_id = ? AND target_session_id IS NOT NULL", [run_id]
        if only is not None:
            where += f" AND notification_id IN ({','.join('?' * len(only))})"
            params.extend(only)
        return self._lease(where, params, limit)

    def lease_untargeted(self, limit: int = 100) -> list[NotificationRow]:
        return self._lease(" AND target_session_id IS NULL", [], limit)

    def _lease(self, where: str, params: list[Any], limit: int) -> list[NotificationRow]:
        """Take the delivery lease of the undelivered rows nobody holds that also meet ``where``; each gets its own
        token."""
        now = self.clock()
        sql = self.dialect.sql
        where = "delivered_at IS NULL AND (delivery_expires_at IS NULL OR delivery_expires_at <= ?)" + where
        params = [now, *params]
        taken: list[NotificationRow] = []
        # A read first: a host looks on every pass of its loop and there is nearly always nothing to take, which
        # must not cost a write transaction (and its fsync) each time. A row committed after this read is taken
        # on the next look, as one committed just after the transaction would be.
        if (
            not self.db.connection()
            .execute(sql(f"SELECT 1 FROM notifications WHERE {where} LIMIT 1"), params)
            .fetchone()
        ):
            return taken
        with self.db.transaction() as conn:
            found = conn.execute(
                sql(
                    f"SELECT notification_id FROM notifications WHERE {where} "
                    "ORDER BY created_at, notification_id LIMIT ?"
                ),
                (*params, limit),
            ).fetchall()
            for (ident,) in found:
                token = secrets.token_hex(16)
                conn.execute(
                    sql(
                        "UPDATE notifications SET delivery_token = ?, delivery_expires_at = ? WHERE notification_id = ?"
                    ),
                    (token, now + DELIVERY_LEASE_MS, ident),
                )
                row = conn.execute(sql(f"{_SELECT} WHERE notification_id = ?"), (ident,)).fetchone()
                taken.append(NotificationRow(*row))
        return taken

    def mark_delivered(self, notification_id: str, token: str) -> bool:
        now = self.clock()
        with self.db.transaction() as conn:
            cursor = conn.execute(
                self.dialect.sql(
                    "UPDATE notifications SET delivered_at = ?, delivery_token = NULL, delivery_expires_at = NULL "
                    "WHERE notification_id = ? AND delivery_token = ? AND delivered_at IS NULL"
                ),
                (now, notification_id, token),
            )
            return cursor.rowcount == 1
