"""The token bucket of a shared provider rate limit, as pure arithmetic (``docs/rate-limits.md``).

Both stores (``piw.store.db.rate_limits`` in ``piw.sqlite``, ``piw.store.pg.rate_limits`` in PostgreSQL) read a
bucket row and the live slots inside one transaction, ask :func:`admit` whether a request may start, and write
back what it returns; this module holds what they agree on, so the two modes cannot drift apart.

- ``requests_per_minute``: a bucket of that many request tokens, refilled continuously; a request takes one.
- ``tokens_per_minute``: a bucket of that many model tokens; a request starts while it is above zero and is
  charged its real input + output tokens when it ends (it may go below zero; later callers wait the refill).
- ``concurrency``: live slots (requests in flight) of the bucket, counted, never a counter that could drift.
- ``paused_until``: a ``429`` with ``Retry-After`` sets it; every caller waits until then.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from piw.config.rate_limits import RateLimit

SLOT_LEASE_MS = 2 * 60 * 1000
"""A slot's backstop expiry, renewed every :data:`RENEW_MS` while its response streams: a holder that died on
another host frees its slot at the latest after this."""
RENEW_MS = 30_000
MAX_WAIT_MS = 250
"""The longest a waiting caller sleeps before it looks again (a released slot is seen within this)."""


@dataclass(frozen=True)
class Bucket:
    """One bucket row."""

    requests: float
    tokens: float
    refilled_at: int
    paused_until: int = 0
    pause_reason: str | None = None

    def columns(self) -> tuple[float, float, int, int, str | None]:
        """The row's values in the order both stores write (and read) the columns: ``requests, tokens,
        refilled_at, paused_until, pause_reason``."""
        return (self.requests, self.tokens, self.refilled_at, self.paused_until, self.pause_reason)


def full(limit: RateLimit, now: int) -> Bucket:
    return Bucket(float(limit.requests_per_minute or 0), float(limit.tokens_per_minute or 0), now)


def refilled(bucket: Bucket, limit: RateLimit, now: int) -> Bucket:
    """The bucket at ``now``: each bucket filled at its per-minute rate since ``refilled_at``, up to its size."""
    elapsed = max(0, now - bucket.refilled_at)
    requests, tokens = bucket.requests, bucket.tokens
    if limit.requests_per_minute:
        rpm = limit.requests_per_minute
        requests = min(float(rpm), requests + elapsed * rpm / 60_000)
    if limit.tokens_per_minute:
        tpm = limit.tokens_per_minute
        tokens = min(float(tpm), tokens + elapsed * tpm / 60_000)
    return Bucket(requests, tokens, now, bucket.paused_until, bucket.pause_reason)


def admit(bucket: Bucket, live_slots: int, limit: RateLimit, now: int) -> tuple[Bucket, int]:
    """``(bucket after, 0)`` when a request may start now (its request token taken), else ``(bucket, wait_ms)``:
    how long until it is worth looking again."""
    bucket = refilled(bucket, limit, now)
    if bucket.paused_until > now:
        return bucket, bucket.paused_until - now
    if limit.concurrency and live_slots >= limit.concurrency:
        return bucket, MAX_WAIT_MS
    if limit.requests_per_minute and bucket.requests < 1.0:
        return bucket, _until(1.0 - bucket.requests, limit.requests_per_minute)
    if limit.tokens_per_minute and bucket.tokens <= 0.0:
        return bucket, _until(1.0 - bucket.tokens, limit.tokens_per_minute)
    requests = bucket.requests - 1.0 if limit.requests_per_minute else bucket.requests
    return Bucket(requests, bucket.tokens, now, bucket.paused_until, bucket.pause_reason), 0


def charged(bucket: Bucket, limit: RateLimit, now: int, tokens: int) -> Bucket:
    """The bucket after a request that used ``tokens`` ended."""
    bucket = refilled(bucket, limit, now)
    if not limit.tokens_per_minute or tokens <= 0:
        return bucket
    return Bucket(bucket.requests, bucket.tokens - tokens, now, bucket.paused_until, bucket.pause_reason)


def _until(missing: float, per_minute: int) -> int:
    return max(1, int(missing * 60_000 / per_minute) + 1)


def holder() -> str:
    """``host:pid`` of this process: a slot whose holder died on this host is freed at once."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_dead(value: str) -> bool:
    """Whether ``value`` names a process on this host that no longer exists."""
    host, _, pid = value.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
