"""The notification outbox on PostgreSQL (``docs/detached.md``, "Notifications"; ``docs/many-machines.md``).

Rows and rules are SQLite mode's (:class:`~piw.store.db.outbox.SqliteOutbox` through the PostgreSQL dialect): one
row per node execution, the first content wins. Taking delivery leases differs: consumers on several hosts lock
the rows they take with ``FOR UPDATE SKIP LOCKED`` and compare expiry with ``now_ms()``, the database clock, so
two hosts never hold one notification's lease at once, and an expired lease is taken again (redelivery, same
notification id).
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from typing import Any, ClassVar

from piw.store.db.database import Clock
from piw.store.db.dialect import POSTGRES, Dialect
from piw.store.db.outbox import _COLUMNS, DELIVERY_LEASE_MS, NotificationRow, SqliteOutbox
from piw.store.pg.clock import ClockedDatabase

_RETURNING = ", ".join(f"n.{column}" for column in _COLUMNS)


class PgOutbox(SqliteOutbox):
    """:class:`~piw.store.db.outbox.Outbox` over the ``notifications`` table in PostgreSQL."""

    dialect: ClassVar[Dialect] = POSTGRES

    def __init__(self, db: ClockedDatabase, clock: Clock | None = None) -> None:
        self.db = db  # type: ignore[assignment]  # (transaction()/connection() shaped like SQLite's Database)
        self.clock = clock or db.clock

    def lease_for_run(
        self, run_id: str, only: Collection[str] | None = None, limit: int = 100
    ) -> list[NotificationRow]:
        if only is not None and not only:
            return []
        where = " AND run_id = %s AND target_session_id IS NOT NULL"
        params: list[Any] = [run_id]
        if only is not None:
            where += " AND notification_id = ANY(%s)"
            params.append(list(only))
        return self._lease(where, params, limit)

    def lease_untargeted(self, limit: int = 100) -> list[NotificationRow]:
        return self._lease(" AND target_session_id IS NULL", [], limit)

    def _lease(self, where: str, params: list[Any], limit: int) -> list[NotificationRow]:
        with self.db.transaction() as conn:
            found = conn.execute(
                "SELECT notification_id FROM notifications WHERE delivered_at IS NULL "
                f"AND (delivery_expires_at IS NULL OR delivery_expires_at <= now_ms()){where} "
                "ORDER BY created_at, notification_id LIMIT %s FOR UPDATE SKIP LOCKED",
                (*params, limit),
            ).fetchall()
            if not found:
                return []
            ids = [ident for (ident,) in found]
            tokens = [secrets.token_hex(16) for _ in ids]
            rows = conn.execute(
                "UPDATE notifications n SET delivery_token = v.token, delivery_expires_at = now_ms() + %s "
                "FROM unnest(%s::text[], %s::text[]) AS v(id, token) WHERE n.notification_id = v.id "
                f"RETURNING {_RETURNING}",
                (DELIVERY_LEASE_MS, ids, tokens),
            ).fetchall()
        order = {ident: index for index, ident in enumerate(ids)}
        return sorted((NotificationRow(*row) for row in rows), key=lambda row: order[row.notification_id])
