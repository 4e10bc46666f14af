"""The database place of a command: one PostgreSQL, opened on first use, and the mirrors of its runs
(``docs/many-machines.md``).

:func:`use` resolves where a home's runs live (``--database`` > ``PIW_DATABASE`` > config > SQLite) and registers
the place with :mod:`piw.store.place`, which lower layers read; this module is the only one that opens the pool, the
PostgreSQL run database and the mirrors, so nothing below it imports psycopg.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piw.store.place import (
    database_place,
    mirrors_at,
    register,
    register_mirrors,
    registered,
    unregister_mirrors,
)

if TYPE_CHECKING:
    from piw.store.db.run_database import RunDatabase
    from piw.store.pg.setting import DatabaseSetting
    from piw.store.run_store import RunStores
    from piw.store.trace import Durability, FileLayer


class DatabasePlace:
    """A command's place in database mode: one PostgreSQL, opened on first use, and the mirrors of its runs."""

    def __init__(self, home: Path, setting: DatabaseSetting) -> None:
        self.home = home
        self.setting = setting
        self._lock = threading.Lock()
        self._db: Any = None
        self._run_database: RunDatabase | None = None
        self._mirrors: Any = None

    @property
    def db(self) -> Any:
        """The :class:`~piw.store.pg.connection.PgDatabase` (its pool opened, an empty schema created)."""
        with self._lock:
            if self._db is None:
                from piw.store.pg.connection import PgDatabase

                self._db = PgDatabase.open(self.setting)
            return self._db

    @property
    def mirrors(self) -> Any:
        """The :class:`~piw.store.pg.mirror.Mirrors` of this database under ``PIW_HOME``."""
        db = self.db
        with self._lock:
            if self._mirrors is None:
                from piw.store.pg.mirror import Mirrors as PgMirrors

                self._mirrors = PgMirrors.open(db, self.home)
                self._mirrors.queue = lambda: self.run_database().queue
                register_mirrors(self._mirrors, self.home)
            return self._mirrors

    def run_database(self) -> RunDatabase:
        db = self.db
        with self._lock:
            if self._run_database is None:
                from piw.store.pg.run_database import open_pg_run_database

                self._run_database = open_pg_run_database(db)
            return self._run_database

    def run_stores(self, durability: Durability, files: FileLayer | None) -> RunStores:
        from piw.store.pg.run_store import PgRunStores

        return PgRunStores(self.db, self.mirrors, durability)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def use(
    home: Path, database: str | None = None, *, env: Mapping[str, str] | None = None
) -> DatabasePlace | None:
    """Resolve where ``home``'s runs live for this command (``--database`` > ``PIW_DATABASE`` > config > SQLite)
    and remember it; the database place, or ``None`` for SQLite. Called once per command, before any run is
    touched (``piw.cli.place``)."""
    from piw.store.pg.setting import resolve_database

    setting = resolve_database(database, home=home, env=os.environ if env is None else env)
    current = registered(home)
    if setting is None:
        register(home, None)
        return None
    if isinstance(current, DatabasePlace) and current.setting == setting:
        return current
    place = DatabasePlace(home, setting)
    register(home, place)
    return place


def forget(home: Path) -> None:
    """Back to SQLite mode for ``home`` (tests that switch modes in one process), closing its pool."""
    place = registered(home)
    register(home, None)
    if isinstance(place, DatabasePlace):
        if place._mirrors is not None:
            unregister_mirrors(place._mirrors.root)
        place.close()


@contextlib.contextmanager
def following(home: Path, run_id: str, *, active: bool = True) -> Iterator[None]:
    """While a viewer follows a run live: in database mode its mirror is kept current from the database (woken by
    ``LISTEN <schema>_trace``, and at least every second); nothing to do in SQLite mode."""
    place = database_place(home) if active else None
    if place is None:
        yield
        return
    with following_mirror(place.mirrors.root / "runs" / run_id):
        yield


@contextlib.contextmanager
def following_mirror(bundle_path: Path) -> Iterator[None]:
    """:func:`following` for a bundle already open: a mirror's (``root/runs/<runId>``) is kept current while the
    block runs; a SQLite-mode bundle needs nothing."""
    mirrors: Any = mirrors_at(bundle_path.parent.parent)
    if mirrors is None:
        yield
        return
    from piw.store.pg.notify import TraceListener

    run_id = bundle_path.name
    db = mirrors.db
    listener = TraceListener(
        db.setting.url, db.channel("trace"), run_id, lambda: mirrors.sync(run_id)
    ).start()
    try:
        yield
    finally:
        listener.close()
