"""The schedules of a home: ``piw.sqlite``, or in database mode the shared PostgreSQL (``docs/schedules.md``)."""

from __future__ import annotations

from pathlib import Path

from piw.store.db.database import open_database
from piw.store.db.schedules import SqliteSchedules
from piw.store.place import database_place


def open_schedules(home: Path) -> SqliteSchedules:
    """Where ``home``'s schedules live for this command: every host of a database shares them."""
    place = database_place(home)
    if place is not None:
        from piw.store.pg.clock import ClockedDatabase
        from piw.store.pg.schedules import PgSchedules

        return PgSchedules(ClockedDatabase(place.db))
    return SqliteSchedules(open_database(home))
