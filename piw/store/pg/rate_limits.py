"""Shared provider rate limits in PostgreSQL: one limit for every host of the database (``docs/rate-limits.md``).

The same buckets as ``piw.store.db.rate_limits`` (the arithmetic is ``piw.store.db.rate_bucket``), in the tables of
migration 0002. A caller locks its bucket row with ``FOR UPDATE`` (the first caller inserts it), so admitting a
request is serialised per bucket across hosts; times are the database clock ``now_ms()``. A slot whose holder died
on this host is freed at once, one on another host when its lease (renewed while the response streams) runs out.
"""

from __future__ import annotations

import secrets
from typing import Any

from piw.config.rate_limits import RateLimit
from piw.errors import StateSchemaMismatch
from piw.store.db.rate_bucket import (
    SLOT_LEASE_MS,
    Bucket,
    admit,
    full,
    holder,
    holder_dead,
    refilled,
)
from piw.store.db.rate_limits import state_of

_BUCKET = (
    "SELECT requests, tokens, refilled_at, paused_until, pause_reason FROM rate_limits WHERE bucket = %s"
)
_UPSERT = (
    "INSERT INTO rate_limits (bucket, requests, tokens, refilled_at) VALUES (%s, %s, %s, now_ms()) "
    "ON CONFLICT (bucket) DO UPDATE SET bucket = excluded.bucket "
    "RETURNING requests, tokens, refilled_at, paused_until, pause_reason, now_ms(), "
    "(SELECT coalesce(json_agg(json_build_array(slot_id, holder, expires_at)), '[]'::json) "
    "FROM rate_limit_slots WHERE bucket = %s)"
)
_CHARGE = (
    # piw.store.db.rate_bucket.charged, in one statement with the slot's release: refill both buckets to now
    # (capped at their sizes), then take the tokens the request used
    "WITH gone AS (DELETE FROM rate_limit_slots WHERE slot_id = %(slot)s) UPDATE rate_limits SET "
    "tokens = LEAST(%(tpm)s, tokens + GREATEST(0, now_ms() - refilled_at) * %(tpm)s / 60000.0) - %(used)s, "
    "requests = CASE WHEN %(rpm)s > 0 THEN LEAST(%(rpm)s, requests + GREATEST(0, now_ms() - refilled_at) "
    "* %(rpm)s / 60000.0) ELSE requests END, refilled_at = GREATEST(refilled_at, now_ms()) "
    "WHERE bucket = %(bucket)s"
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

    def _locked(self, conn: Any, name: str, limit: RateLimit) -> tuple[Bucket, int, list[Any]]:
        """The bucket row, locked for this transaction (created full on first use), ``now_ms()`` and the bucket's
        slots: one round trip (an upsert that always returns the row takes its lock)."""
        start = full(limit, 0)
        try:
            row = conn.execute(_UPSERT, (name, start.requests, start.tokens, name)).fetchone()
        except Exception as exc:
            if type(exc).__name__ == "UndefinedTable":
                raise StateSchemaMismatch(
                    "The database has no rate-limit tables (schema version 1); run 'piw db migrate' once."
                ) from None
            raise
        bucket = Bucket(float(row[0]), float(row[1]), int(row[2]), int(row[3]), row[4])
        return bucket, int(row[5]), list(row[6] or [])

    @staticmethod
    def _store(conn: Any, name: str, bucket: Bucket) -> None:
        conn.execute(_STORE, (*bucket.columns(), name))

    @staticmethod
    def _live(conn: Any, slots: list[Any], now: int) -> int:
        """How many of ``slots`` are in flight, after deleting those of dead holders (or past their lease)."""
        dead = [slot_id for slot_id, who, expires in slots if int(expires) <= now or holder_dead(str(who))]
        if dead:
            conn.execute("DELETE FROM rate_limit_slots WHERE slot_id = ANY(%s)", (dead,))
        return len(slots) - len(dead)

    def try_acquire(self, name: str, limit: RateLimit) -> tuple[str | None, int]:
        with self.db.connection() as conn:
            bucket, now, slots = self._locked(conn, name, limit)
            bucket, wait = admit(bucket, self._live(conn, slots, now), limit, now)
            if wait:
                self._store(conn, name, bucket)
                return None, wait
            slot = secrets.token_hex(8)
            conn.execute(  # the bucket and the new slot in one round trip
                f"WITH stored AS ({_STORE}) INSERT INTO rate_limit_slots "
                "(slot_id, bucket, holder, acquired_at, expires_at) VALUES (%s, %s, %s, %s, %s)",
                (*bucket.columns(), name, slot, name, self._holder, now, now + SLOT_LEASE_MS),
            )
            return slot, 0

    def renew(self, name: str, slot: str) -> None:
        with self.db.connection() as conn:
            conn.execute(
                "UPDATE rate_limit_slots SET expires_at = now_ms() + %s WHERE slot_id = %s",
                (SLOT_LEASE_MS, slot),
            )

    def release(self, name: str, slot: str, limit: RateLimit, tokens: int) -> None:
        with self.db.autocommit() as conn:  # one statement, its own transaction: one round trip
            if limit.tokens_per_minute and tokens > 0:
                rpm = limit.requests_per_minute or 0
                params = {
                    "slot": slot,
                    "tpm": limit.tokens_per_minute,
                    "rpm": rpm,
                    "used": tokens,
                    "bucket": name,
                }
                conn.execute(_CHARGE, params)
            else:
                conn.execute("DELETE FROM rate_limit_slots WHERE slot_id = %s", (slot,))

    def pause(self, name: str, limit: RateLimit, until_ms: int, reason: str) -> None:
        """Every caller on every host waits until ``until_ms`` (a host's clock: the pause is a length, so the
        database clock's ``now_ms()`` plus what is left of it)."""
        from piw.store.db.database import now_ms

        with self.db.connection() as conn:
            bucket, now, _ = self._locked(conn, name, limit)
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
