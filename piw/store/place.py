"""Which run stores and run database a command uses: SQLite in ``PIW_HOME``, or PostgreSQL (``docs/many-machines.md``).

A command resolves its place once, before it touches a run (:func:`use`): ``--database URL`` > ``PIW_DATABASE`` >
``config.toml [database]`` > SQLite in ``PIW_HOME``. Everything below the command keeps passing ``home`` around;
what differs in database mode is looked up here, from that one resolution:

- :func:`open_run_database` and :func:`open_run_stores` (``piw.store.db.run_database``, ``piw.store.run_store``)
  return the PostgreSQL queue, decisions and outbox, and :class:`~piw.store.pg.run_store.PgRunStores`;
- :func:`runs_home` is where the bundles readers read live: ``home`` itself, or in database mode the mirror root
  ``$PIW_HOME/pg/<database id>/`` (its ``runs/`` are mirrors, its ``piw.sqlite`` only the local ``runs`` index);
- :func:`mirrors_at` is the mirror set of such a root, which views use to bring a mirror up to date before they
  read it (``piw.store.pg.mirror``).

With no database configured nothing is registered, every lookup returns ``home``, and SQLite mode is exactly what
it was. This module imports neither psycopg nor the fold: ``piw --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from piw.errors import PiwError

if TYPE_CHECKING:
    from piw.store.db.rows import QueueRow
    from piw.store.db.run_database import RunDatabase
    from piw.store.pg.setting import DatabaseSetting
    from piw.store.run_store import RunStores
    from piw.store.trace import Durability, FileLayer


log = logging.getLogger(__name__)


class Mirrors(Protocol):
    """The local mirrors of one database's runs (``piw.store.pg.mirror.Mirrors``)."""

    @property
    def root(self) -> Path:
        """The mirror root: ``runs/`` holds one bundle per run this host read or ran."""
        ...

    def sync(self, run_id: str) -> None:
        """Bring the run's mirror up to date from the database (``RunNotFound`` when the database has no such run)."""
        ...

    def run_ids(self) -> list[str]:
        """Every run id in the database, newest first."""
        ...

    def queue_row(self, run_id: str) -> QueueRow | None:
        """The run's queue row in the database (liveness for viewers)."""
        ...


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
                _ROOTS[str(self._mirrors.root)] = self._mirrors
            return self._mirrors

    def run_database(self) -> RunDatabase:
        db = self.db
        with self._lock:
            if self._run_database is None:
                from piw.store.db.run_database import open_pg_run_database

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


_PLACES: dict[str, DatabasePlace] = {}
"""``PIW_HOME`` → its database place, for the homes a command resolved into database mode."""
_ROOTS: dict[str, Any] = {}
"""Mirror root → its mirrors (a bundle path tells its root: ``root/runs/<runId>``)."""


def _key(home: Path) -> str:
    return os.fspath(home)


def use(
    home: Path, database: str | None = None, *, env: Mapping[str, str] | None = None
) -> DatabasePlace | None:
    """Resolve where ``home``'s runs live for this command (``--database`` > ``PIW_DATABASE`` > config > SQLite)
    and remember it; the database place, or ``None`` for SQLite. Called once per command, before any run is
    touched (``piw.cli.place``)."""
    from piw.store.pg.setting import resolve_database

    setting = resolve_database(database, home=home, env=os.environ if env is None else env)
    key = _key(home)
    current = _PLACES.get(key)
    if setting is None:
        if current is not None:
            del _PLACES[key]
        return None
    if current is not None and current.setting == setting:
        return current
    place = DatabasePlace(home, setting)
    _PLACES[key] = place
    return place


def forget(home: Path) -> None:
    """Back to SQLite mode for ``home`` (tests that switch modes in one process), closing its pool."""
    place = _PLACES.pop(_key(home), None)
    if place is not None:
        _ROOTS.pop(str(place._mirrors.root) if place._mirrors is not None else "", None)
        place.close()


def database_place(home: Path) -> DatabasePlace | None:
    """The database place of ``home`` when this command runs in database mode."""
    return _PLACES.get(_key(home)) if _PLACES else None


def runs_home(home: Path) -> Path:
    """Where ``home``'s bundles are read and written: ``home``, or in database mode the mirror root."""
    place = database_place(home)
    return home if place is None else place.mirrors.root


def mirrors_at(root: Path) -> Mirrors | None:
    """The mirrors whose root is ``root`` (a bundle's ``path.parent.parent``), or ``None`` (a SQLite home)."""
    if not _ROOTS:
        return None
    found: Mirrors | None = _ROOTS.get(os.fspath(root))
    return found


def sync_mirror(home: Path, run_id: str) -> None:
    """Bring one run's mirror up to date before it is read (nothing in SQLite mode, where the bundle is the run)."""
    place = database_place(home)
    if place is not None:
        place.mirrors.sync(run_id)


REFRESH_LIMIT = 1000
"""A listing in database mode brings the mirrors of at most this many of the newest runs up to date (one query for
their heads, then a sync of each mirror that is behind)."""


def refresh_mirrors(home: Path, limit: int | None = None) -> None:
    """Before a listing in database mode: the mirrors of the newest runs, brought up to date (none in SQLite mode)."""
    place = database_place(home)
    if place is None:
        return
    try:
        place.mirrors.refresh(min(limit or REFRESH_LIMIT, REFRESH_LIMIT))
    except PiwError as exc:  # a run being created, or a row that cannot be read: listed when it can
        log.warning("mirrors not refreshed: %s", exc)


@contextlib.contextmanager
def following(home: Path, run_id: str, *, active: bool = True) -> Iterator[None]:
    """While a viewer follows a run live: in database mode its mirror is kept current from the database (woken by
    ``LISTEN <schema>_trace``, and at least every second); nothing to do in SQLite mode."""
    place = database_place(home) if active else None
    if place is None:
        yield
        return
    from piw.store.pg.notify import TraceListener

    mirrors = place.mirrors
    channel = place.db.channel("trace")
    listener = TraceListener(place.setting.url, channel, run_id, lambda: mirrors.sync(run_id)).start()
    try:
        yield
    finally:
        listener.close()
