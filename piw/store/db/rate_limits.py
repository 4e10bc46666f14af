"""Shared provider rate limits in ``piw.sqlite``: every run and process of one home shares each bucket.

One ``BEGIN IMMEDIATE`` transaction admits a request (reads the bucket and the live slots, takes a request token,
inserts a slot) and one releases it (deletes the slot, charges the tokens it used); the arithmetic is
``piw.store.db.rate_bucket``. This connection commits with ``synchronous=NORMAL``: a bucket that loses its last
commits to a power cut only forgets some spend, and a request stays well under a millisecond of overhead
(``bench/bench_rate_limit.py``). ``docs/rate-limits.md``.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
from pathlib import Path
from typing import Any

from piw.config.rate_limits import RateLimit
from piw.store.db.database import database_path, now_ms, open_database
from piw.store.db.rate_bucket import SLOT_LEASE_MS, Bucket, admit, charged, full, holder, holder_dead


class SqliteRateLimits:
    """The buckets of one home's ``piw.sqlite`` (tables ``rate_limits``, ``rate_limit_slots``)."""

    def __init__(self, home: Path) -> None:
        open_database(home)  # creates the tables (and checks the schema) once
        self.path = database_path(home)
        self._local = threading.local()
        self._holder = holder()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=5.0, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=5000")
            self._local.conn = conn
        return conn

    def _run(self, work: Any) -> Any:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = work(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    @staticmethod
    def _bucket(conn: sqlite3.Connection, name: str, limit: RateLimit, now: int) -> Bucket:
        row = conn.execute(
            "SELECT requests, tokens, refilled_at, paused_until, pause_reason FROM rate_limits WHERE bucket = ?",
            (name,),
        ).fetchone()
        return Bucket(*row) if row is not None else full(limit, now)

    @staticmethod
    def _store(conn: sqlite3.Connection, name: str, bucket: Bucket) -> None:
        conn.execute(
            "INSERT INTO rate_limits (bucket, requests, tokens, refilled_at, paused_until, pause_reason) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(bucket) DO UPDATE SET requests = excluded.requests, "
            "tokens = excluded.tokens, refilled_at = excluded.refilled_at, paused_until = excluded.paused_until, "
            "pause_reason = excluded.pause_reason",
            (name, *bucket.columns()),
        )

    @staticmethod
    def _live(conn: sqlite3.Connection, name: str, now: int) -> int:
        """The bucket's slots in flight, after freeing those of dead holders (or past their backstop)."""
        slots = conn.execute(
            "SELECT slot_id, holder, expires_at FROM rate_limit_slots WHERE bucket = ?", (name,)
        ).fetchall()
        dead = [slot_id for slot_id, who, expires in slots if expires <= now or holder_dead(who)]
        for slot_id in dead:
            conn.execute("DELETE FROM rate_limit_slots WHERE slot_id = ?", (slot_id,))
        return len(slots) - len(dead)

    def try_acquire(self, name: str, limit: RateLimit) -> tuple[str | None, int]:
        """``(slot id, 0)`` when a request may start now, else ``(None, ms to wait before asking again)``."""

        def work(conn: sqlite3.Connection) -> tuple[str | None, int]:
            now = now_ms()
            bucket, wait = admit(
                self._bucket(conn, name, limit, now), self._live(conn, name, now), limit, now
            )
            self._store(conn, name, bucket)
            if wait:
                return None, wait
            slot = secrets.token_hex(8)
            conn.execute(
                "INSERT INTO rate_limit_slots (slot_id, bucket, holder, acquired_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (slot, name, self._holder, now, now + SLOT_LEASE_MS),
            )
            return slot, 0

        result: tuple[str | None, int] = self._run(work)
        return result

    def renew(self, name: str, slot: str) -> None:
        """Push a slot's backstop expiry out while its response still streams."""
        self._run(
            lambda conn: conn.execute(
                "UPDATE rate_limit_slots SET expires_at = ? WHERE slot_id = ?",
                (now_ms() + SLOT_LEASE_MS, slot),
            )
        )

    def release(self, name: str, slot: str, limit: RateLimit, tokens: int) -> None:
        def work(conn: sqlite3.Connection) -> None:
            now = now_ms()
            conn.execute("DELETE FROM rate_limit_slots WHERE slot_id = ?", (slot,))
            if limit.tokens_per_minute and tokens > 0:
                self._store(conn, name, charged(self._bucket(conn, name, limit, now), limit, now, tokens))

        self._run(work)

    def pause(self, name: str, limit: RateLimit, until_ms: int, reason: str) -> None:
        """Every caller of the bucket waits until ``until_ms`` (a later pause wins; an earlier one changes nothing)."""

        def work(conn: sqlite3.Connection) -> None:
            now = now_ms()
            bucket = self._bucket(conn, name, limit, now)
            if until_ms > bucket.paused_until:
                bucket = Bucket(bucket.requests, bucket.tokens, bucket.refilled_at, until_ms, reason)
                self._store(conn, name, bucket)

        self._run(work)

    def snapshot(self, name: str, limit: RateLimit) -> dict[str, Any]:
        """The bucket now, for ``piw providers``: what is left, in flight and any pause (nothing is written)."""
        from piw.store.db.rate_bucket import refilled

        conn = self._conn()
        now = now_ms()
        bucket = refilled(self._bucket(conn, name, limit, now), limit, now)
        slots = conn.execute(
            "SELECT holder, expires_at FROM rate_limit_slots WHERE bucket = ?", (name,)
        ).fetchall()
        live = sum(1 for who, expires in slots if expires > now and not holder_dead(who))
        return state_of(bucket, live, limit, now)


def state_of(bucket: Bucket, in_flight: int, limit: RateLimit, now: int) -> dict[str, Any]:
    """The ``--json`` shape of a bucket's state (``docs/rate-limits.md``)."""
    return {
        "requestsLeft": int(bucket.requests) if limit.requests_per_minute else None,
        "tokensLeft": int(bucket.tokens) if limit.tokens_per_minute else None,
        "inFlight": in_flight,
        "pausedForMs": max(0, bucket.paused_until - now) or None,
        "pauseReason": bucket.pause_reason if bucket.paused_until > now else None,
    }
