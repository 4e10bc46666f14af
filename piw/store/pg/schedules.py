"""Schedules on PostgreSQL (``docs/schedules.md``, ``docs/many-machines.md``): SQLite mode's statements through the
PostgreSQL dialect; deciding a schedule's fires holds its row with ``SELECT … FOR UPDATE``, so two hosts looking
at the same schedule at once decide each fire once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar

from piw.store.db.dialect import POSTGRES, Dialect
from piw.store.db.schedules import SqliteSchedules
from piw.store.pg.clock import ClockedDatabase


class PgSchedules(SqliteSchedules):
    """The schedules of a PostgreSQL run database (migration 0006)."""

    dialect: ClassVar[Dialect] = POSTGRES
    lock_suffix: ClassVar[str] = " FOR UPDATE"

    def __init__(self, db: ClockedDatabase) -> None:
        self.db = db  # type: ignore[assignment]  # (transaction() shaped like SQLite's Database)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Any]:
        with self.db.transaction() as conn:
            yield conn
