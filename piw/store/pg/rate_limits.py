"""Shared provider rate limits in PostgreSQL: one limit for every host of the database (``docs/rate-limits.md``).

The same buckets as ``piw.store.db.rate_limits`` (the arithmetic is ``piw.providers.rate_bucket``), in the tables of
migration 0002. A caller locks its bucket row with ``FOR UPDATE`` (the first caller inserts it), so admitting a
request is serialised per bucket across hosts; times are the database clock ``now_ms()``. A slot whose holder died
on this host is freed at once, one on another host when its lease (renewed while the response streams) runs out.
"""

from __future__ import annotations

import secrets
from typing import Any

from piw.errors import StateSchemaMismatch
from piw.providers.rate_bucket import (
    SLOT_LEASE_MS,
    Bucket,
    admit,
    charged,
    full,
    holder,
    holder_dead,
    refilled,
)
from piw.providers.rate_limit_config import RateLimit
from piw.store.db.rate_limits import state_of

_BUCKET = (
    "SELECT requests, tokens, refilled_at, paused_until, pause_reason FROM rate_limits WHERE bucket = %s"
)
_STORE = (
    "UPDATE rate_limits SET requests = %s, tokens = %s, refilled_at = %s, paused_until = %s, pause_reason = %s "
    "WHERE bucket = %s"
)


class PgRateLimits:
    """The buckets of one PostgreSQL database."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self._holder = holder()

    def _locked(self, conn: Any, name: str, limit: RateLimit) -> tuple[Bucket, int]:
        """The bucket row, locked for this transaction (created full on first use), and ``now_ms()``."""
        try:
            now = int(conn.execute("SELECT now_ms()").fetchone()[0])
            start = full(limit, now)
            conn.execute(
                "INSERT INTO rate_limits (bucket, requests, tokens, refilled_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (bucket) DO NOTHING",
                (name, start.requests, start.tokens, now),
            )
        except Exception as exc:
            if type(exc).__name__ == "UndefinedTable":
                raise StateSchemaMismatch(
                    "The database has no rate-limit tables (schema version 1); run 'piw db migrate' once."
                ) from None
            raise
        row = conn.execute(_BUCKET + " FOR UPDATE", (name,)).fetchone()
        return Bucket(float(row[0]), float(row[1]), int(row[2]), int(row[3]), row[4]), now

    @staticmethod
    def _store(conn: Any, name: str, bucket: Bucket) -> None:
        values = (
            bucket.requests,
            bucket.tokens,
            bucket.refilled_at,
            bucket.paused_until,
            bucket.pause_reason,
        )
        conn.execute(_STORE, (*values, name))

    @staticmethod
    def _live(conn: Any, name: str, now: int) -> int:
        slots = conn.execute(
            "SELECT slot_id, holder, expires_at FROM rate_limit_slots WHERE bucket = %s", (name,)
        ).fetchall()
        dead = [slot_id for slot_id, who, expires in slots if expires <= now or holder_dead(who)]
        if dead:
            conn.execute("DELETE FROM rate_limit_slots WHERE slot_id = ANY(%s)", (dead,))
        return len(slots) - len(dead)

    def try_acquire(self, name: str, limit: RateLimit) -> tuple[str | None, int]:
        with self.db.connection() as conn:
            bucket, now = self._locked(conn, name, limit)
            bucket, wait = admit(bucket, self._live(conn, name, now), limit, now)
            self._store(conn, name, bucket)
            if wait:
                return None, wait
            slot = secrets.token_hex(8)
            conn.execute(
                "INSERT INTO rate_limit_slots (slot_id, bucket, holder, acquired_at, expires_at) "
                "VALUES (%s, %s, %s, %s, %s)",
                (slot, name, self._holder, now, now + SLOT_LEASE_MS),
            )
            return slot, 0

    def renew(self, name: str, slot: str) -> None:
        with self.db.connection() as conn:
            conn.execute(
                "UPDATE rate_limit_slots SET expires_at = now_ms() + %s WHERE slot_id = %s",
                (SLOT_LEASE_MS, slot),
            )

    def release(self, name: str, slot: str, limit: RateLimit, tokens: int) -> None:
        with self.db.connection() as conn:
            conn.execute("DELETE FROM rate_limit_slots WHERE slot_id = %s", (slot,))
            if limit.tokens_per_minute and tokens > 0:
                bucket, now = self._locked(conn, name, limit)
                self._store(conn, name, charged(bucket, limit, now, tokens))

    def pause(self, name: str, limit: RateLimit, until_ms: int, reason: str) -> None:
        """Every caller on every host waits until ``until_ms`` (a host's clock: the pause is a length, so the
        database clock's ``now_ms()`` plus what is left of it)."""
        from piw.store.db.database import now_ms

        with self.db.connection() as conn:
            bucket, now = self._locked(conn, name, limit)
            until = now + max(0, until_ms - now_ms())
            if until > bucket.paused_until:
                self._store(
                    conn, name, Bucket(bucket.requests, bucket.tokens, bucket.refilled_at, until, reason)
                )

    def snapshot(self, name: str, limit: RateLimit) -> dict[str, Any]:
        with self.db.connection() as conn:
            now = int(conn.execute("SELECT now_ms()").fetchone()[0])
            row = conn.execute(_BUCKET, (name,)).fetchone()
            bucket = full(limit, now) if row is None else Bucket(float(row[0]), float(row[1]), *row[2:])
            slots = conn.execute(
                "SELECT holder, expires_at FROM rate_limit_slots WHERE bucket = %s", (name,)
            ).fetchall()
        live = sum(1 for who, expires in slots if expires > now and not holder_dead(who))
        return state_of(refilled(bucket, limit, now), live, limit, now)
