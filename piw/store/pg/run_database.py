"""The run database in PostgreSQL: its queue, decisions and outbox over one pool (``docs/many-machines.md``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from piw.store.db.database import Clock
from piw.store.db.run_database import RunDatabase
from piw.store.pg.clock import ClockedDatabase
from piw.store.pg.decisions import PgDecisions
from piw.store.pg.outbox import PgOutbox
from piw.store.pg.queue import PostgresQueue

if TYPE_CHECKING:
    from piw.store.pg.connection import PgDatabase


def open_pg_run_database(db: PgDatabase, clock: Clock | None = None) -> RunDatabase:
    """The run database in PostgreSQL (``piw.store.pg``): every lease on the database clock; ``clock`` pins that
    clock for tests (``piw.store.pg.clock``). Imports the driver, so only for a configured database."""
    clocked = ClockedDatabase(db, clock)
    return RunDatabase(PostgresQueue(clocked), PgDecisions(clocked), PgOutbox(clocked))
