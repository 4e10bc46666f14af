"""Waiting for ``piw.sqlite`` while another process holds its lock: a visible line, a limit, then one error.

SQLite waits ``busy_timeout`` (5 s) for a lock before it gives up. A process that holds the database locked for
longer (a backup, a ``sqlite3`` shell left in a transaction, a stuck process) would otherwise surface as a
traceback. :func:`begin` retries ``BEGIN IMMEDIATE`` until :func:`wait_limit_s` seconds have passed, saying once
that the database is busy (:mod:`piw.store.db.notices`), then raises ``DatabaseBusy`` (exit 75, EX_TEMPFAIL),
with nothing changed (``docs/guarantees.md``, "Database faults"). ``PIW_DB_BUSY_WAIT_S`` sets the limit
(default 60 s).
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from piw.errors import DatabaseBusy
from piw.store.db.notices import notice

DEFAULT_WAIT_S = 60.0
BUSY_TIMEOUT_MS = 5000
"""How long SQLite itself waits for a lock in one attempt (the connection's ``busy_timeout``)."""


def wait_limit_s() -> float:
    """How long a command waits for a busy database in all (``PIW_DB_BUSY_WAIT_S``, default 60 s)."""
    try:
        return max(0.0, float(os.environ.get("PIW_DB_BUSY_WAIT_S", "") or DEFAULT_WAIT_S))
    except ValueError:
        return DEFAULT_WAIT_S


def is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def begin(conn: sqlite3.Connection, path: Path) -> None:
    """``BEGIN IMMEDIATE``, waiting up to the limit while another process holds the database's lock."""
    limit = wait_limit_s()
    started = time.monotonic()
    deadline = started + limit
    told = False
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            if not told:
                told = True
                notice(
                    f"the database {path} is busy (another process holds its lock); waiting up to {limit:g} s "
                    "(PIW_DB_BUSY_WAIT_S)."
                )
            if time.monotonic() >= deadline:
                raise DatabaseBusy(
                    f"The database {path} stayed busy for {time.monotonic() - started:.0f} s (another process "
                    "holds its lock); nothing was changed. Try again once that process is done."
                ) from exc
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
