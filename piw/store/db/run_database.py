"""The run database of a home, opened once: its queue, its decisions and its outbox (``docs/detached.md``).

Each part has its own small protocol (:class:`~piw.store.db.queue.RunQueue`,
:class:`~piw.store.db.decisions.Decisions`, :class:`~piw.store.db.outbox.Outbox`), so a caller takes the one it
needs, and another database brings its own three implementations. SQLite's share one ``piw.sqlite`` and its
per-thread connections; PostgreSQL's (:func:`open_pg_run_database`, ``docs/many-machines.md``) one pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from piw.store.db.database import Clock, now_ms, open_database
from piw.store.db.decisions import Decisions, SqliteDecisions
from piw.store.db.outbox import Outbox, SqliteOutbox
from piw.store.db.queue import RunQueue, SqliteQueue

if TYPE_CHECKING:
    from piw.store.pg.connection import PgDatabase


@dataclass(frozen=True)
class RunDatabase:
    """What processes must agree on about runs: who may write one, what a person answered, what waits to be shown."""

    queue: RunQueue
    decisions: Decisions
    outbox: Outbox


def open_run_database(home: Path, clock: Clock = now_ms) -> RunDatabase:
    """The run database of ``home`` (``piw.sqlite``, created on first use), its clock injectable for tests; in
    database mode the PostgreSQL one the command resolved (``piw.store.place``)."""
    from piw.store.place import database_place

    place = database_place(home)
    if place is not None:
        return place.run_database()
    db = open_database(home)
    return RunDatabase(SqliteQueue(db, clock), SqliteDecisions(db, clock), SqliteOutbox(db, clock))


def open_pg_run_database(db: PgDatabase, clock: Clock | None = None) -> RunDatabase:
    """The run database in PostgreSQL (``piw.store.pg``): every lease on the database clock; ``clock`` pins that
    clock for tests (``piw.store.pg.clock``). Imports the driver, so only for a configured database."""
    from piw.store.pg.clock import ClockedDatabase
    from piw.store.pg.decisions import PgDecisions
    from piw.store.pg.outbox import PgOutbox
    from piw.store.pg.queue import PostgresQueue

    clocked = ClockedDatabase(db, clock)
    return RunDatabase(PostgresQueue(clocked), PgDecisions(clocked), PgOutbox(clocked))
