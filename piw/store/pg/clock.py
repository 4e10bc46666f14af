"""The database clock as the queue, the decisions and the outbox see it (``docs/many-machines.md``, "Leases").

Every lease comparison in PostgreSQL mode happens in SQL, against ``now_ms()`` on the server: a host's wall clock
never decides whether a lease is live. Two things here serve that:

- :class:`ServerClock`, the ``clock`` attribute the run-database protocols expose: the local wall clock moved by
  the offset to the server's, measured once (half a round trip of error) and re-measured every minute. It only
  feeds values that are written, never a lease decision.
- :class:`ClockedDatabase`, a :class:`~piw.store.pg.connection.PgDatabase` seen through an optional *pinned*
  clock: the conformance suite injects a fake clock, and each transaction then sets the session setting
  ``piw.now_ms`` first, so ``now_ms()`` in every statement returns the test's time. Without a pin nothing is set.
  Its ``transaction()``/``connection()`` are shaped like SQLite's ``Database`` (a transaction; one statement
  in its own transaction), so the row operations shared with SQLite mode run unchanged.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from piw.store.db.database import Clock
from piw.store.pg.connection import PgDatabase

RECALIBRATE_MS = 60_000


def _local_ms() -> int:
    return time.time_ns() // 1_000_000


class ServerClock:
    """Epoch milliseconds close to the server's ``now_ms()``, without a round trip per reading."""

    def __init__(self, db: PgDatabase) -> None:
        self._db = db
        self._offset = 0
        self._measured_at: int | None = None
        self._lock = threading.Lock()

    def __call__(self) -> int:
        local = _local_ms()
        if self._measured_at is None or local - self._measured_at > RECALIBRATE_MS:
            self._measure()
            local = _local_ms()
        return local + self._offset

    def _measure(self) -> None:
        with self._lock:
            before = _local_ms()
            server = self._db.server_now_ms()
            after = _local_ms()
            self._offset = server - (before + after) // 2
            self._measured_at = after


class _Result:
    """A statement's rows, fetched before its connection went back to the pool."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self._rowcount = rowcount

    @property
    def rowcount(self) -> int:
        return self._rowcount

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return list(self._rows)


class _OneShot:
    """``connection().execute(…)`` as SQLite mode's readers write it: each statement in its own transaction."""

    def __init__(self, owner: ClockedDatabase) -> None:
        self._owner = owner

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> _Result:
        with self._owner.single() as conn:
            cursor = conn.execute(sql, parameters)
            rows = cursor.fetchall() if cursor.description else []
            return _Result(rows, cursor.rowcount)


class ClockedDatabase:
    """A PostgreSQL database with the database clock, optionally pinned to an injected clock (tests)."""

    def __init__(self, db: PgDatabase, clock: Clock | None = None) -> None:
        self.pg = db
        self.pinned = clock is not None
        self.clock: Clock = clock if clock is not None else ServerClock(db)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A pooled connection in a transaction; with a pinned clock, ``now_ms()`` reads it in this transaction."""
        with self.pg.connection() as conn:
            if self.pinned:
                conn.execute("SELECT set_config('piw.now_ms', %s, true)", (str(self.clock()),))
            yield conn

    @contextlib.contextmanager
    def single(self) -> Iterator[Any]:
        """A connection for one statement: autocommit (one round trip), or with a pinned clock a transaction,
        since the pin lives in a transaction."""
        if self.pinned:
            with self.transaction() as conn:
                yield conn
        else:
            with self.pg.autocommit() as conn:
                yield conn

    @contextlib.contextmanager
    def timed(self) -> Iterator[tuple[Any, int]]:
        """A transaction and ``now_ms()`` at its start, in one round trip."""
        with self.pg.connection() as conn:
            if self.pinned:
                found = conn.execute(
                    "SELECT set_config('piw.now_ms', %s, true)::bigint", (str(self.clock()),)
                )
            else:
                found = conn.execute("SELECT now_ms()")
            row = found.fetchone()
            assert row is not None
            yield conn, int(row[0])

    def connection(self) -> _OneShot:
        return _OneShot(self)

    def now(self, conn: Any) -> int:
        """``now_ms()`` inside ``conn``'s transaction (the pinned time, or the server's)."""
        found = conn.execute("SELECT now_ms()").fetchone()
        assert found is not None
        return int(found[0])
