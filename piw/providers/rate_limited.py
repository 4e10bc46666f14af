"""A provider behind its shared rate limit: a request waits for a slot in the bucket every caller shares.

``[providers.NAME] rate_limit`` (``docs/rate-limits.md``) wraps the adapter in :class:`RateLimitedProvider`. Before
each request it takes a slot from the bucket in the run database (``piw.sqlite``, or PostgreSQL in database mode),
so the limit holds across the parallel children of one run, every run and process of the home, and every host of
the database; the slot is given back when the response ends, charged its tokens. A response that failed with a
``Retry-After`` (a ``429``) pauses the bucket for every caller until then, not only for the one that got it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from piw.config.rate_limits import RateLimit
from piw.providers.base import ChatRequest, DoneEvent, ErrorEvent, Provider, ProviderEvent, WrappedProvider
from piw.providers.messages import AssistantReply
from piw.store.db.database import now_ms
from piw.store.db.rate_bucket import MAX_WAIT_MS, RENEW_MS


class RateLimits(Protocol):
    """Where the buckets live: ``piw.store.db.rate_limits`` or ``piw.store.pg.rate_limits``."""

    def try_acquire(self, name: str, limit: RateLimit) -> tuple[str | None, int]: ...
    def renew(self, name: str, slot: str) -> None: ...
    def release(self, name: str, slot: str, limit: RateLimit, tokens: int) -> None: ...
    def pause(self, name: str, limit: RateLimit, until_ms: int, reason: str) -> None: ...
    def snapshot(self, name: str, limit: RateLimit) -> dict[str, Any]: ...


_OPENED: dict[str, RateLimits] = {}
_LOCK = threading.Lock()


def open_rate_limits(home: Path) -> RateLimits:
    """The buckets of ``home``'s run database: PostgreSQL in database mode (one limit for every host), else
    ``piw.sqlite`` (one limit for every process of the machine's home)."""
    from piw.store.place import database_place

    place = database_place(home)
    key = f"pg:{id(place)}" if place is not None else str(home)
    with _LOCK:
        found = _OPENED.get(key)
        if found is None:
            if place is not None:
                from piw.store.pg.rate_limits import PgRateLimits

                found = PgRateLimits(place.db)
            else:
                from piw.store.db.rate_limits import SqliteRateLimits

                found = SqliteRateLimits(home)
            _OPENED[key] = found
        return found


class RateLimitedProvider(WrappedProvider):
    """Takes a slot of the shared bucket before every request and gives it back when the response ends."""

    def __init__(self, inner: Provider, limits: RateLimits, bucket: str, limit: RateLimit) -> None:
        super().__init__(inner)
        self.limits = limits
        self.bucket = bucket
        self.limit = limit

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        slot = self._acquire(cancel)
        if slot is None:  # cancelled (or past its deadline) while waiting: nothing was sent
            reply = AssistantReply(
                stop_reason="aborted", error_message="Request aborted.", provider=self.name, model=self.model
            )
            yield ErrorEvent(content_index=0, message=reply)
            return
        tokens = 0
        renewed = now_ms()
        try:
            for event in self.inner.stream(request, cancel):
                if now_ms() - renewed > RENEW_MS:  # a long response keeps its slot (its lease is a backstop)
                    self.limits.renew(self.bucket, slot)
                    renewed = now_ms()
                if isinstance(event, DoneEvent | ErrorEvent):
                    usage = event.message.usage
                    tokens = usage.input + usage.output
                if isinstance(event, ErrorEvent) and event.retry_after_s is not None:
                    # before the loop sees it: its retry, and every other caller, wait for the same pause
                    until = now_ms() + int(event.retry_after_s * 1000)
                    self.limits.pause(self.bucket, self.limit, until, event.message.error_message or "429")
                yield event
        finally:
            self.limits.release(self.bucket, slot, self.limit, tokens)

    def _acquire(self, cancel: threading.Event) -> str | None:
        while True:
            slot, wait_ms = self.limits.try_acquire(self.bucket, self.limit)
            if slot is not None:
                return slot
            if cancel.wait(min(wait_ms, MAX_WAIT_MS) / 1000):
                return None
