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

import os
from pathlib import Path
from typing import Any, Protocol

from piw.errors import PiwError

# The protocols below name what they return only in words (``Any`` to the type checker): this module sits under
# the bundle, the run database and the stores, which all look their place up here, so it imports none of them.


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

    def queue_row(self, run_id: str) -> Any:
        """The run's queue row in the database (liveness for viewers)."""
        ...


class Place(Protocol):
    """A command's place in database mode (``piw.store.pg.place.DatabasePlace``): what lower layers look up."""

    @property
    def setting(self) -> Any:
        """The ``piw.store.pg.setting.DatabaseSetting`` (its URL never printed unredacted)."""
        ...

    @property
    def db(self) -> Any:
        """The ``piw.store.pg.connection.PgDatabase`` (its pool opened on first use)."""
        ...

    @property
    def mirrors(self) -> Any:
        """The :class:`Mirrors` of its runs under ``PIW_HOME``."""
        ...

    def run_database(self) -> Any:
        """The ``piw.store.db.run_database.RunDatabase`` on PostgreSQL."""
        ...

    def run_stores(self, durability: Any, files: Any) -> Any:
        """The ``piw.store.run_store.RunStores`` that keep traces in PostgreSQL."""
        ...


_PLACES: dict[str, Place] = {}
"""``PIW_HOME`` → its database place, for the homes a command resolved into database mode."""
_ROOTS: dict[str, Any] = {}
"""Mirror root → its mirrors (a bundle path tells its root: ``root/runs/<runId>``)."""
_HOMES: dict[str, Path] = {}
"""Mirror root → the home it belongs to."""


def _key(home: Path) -> str:
    return os.fspath(home)


def register(home: Path, place: Place | None) -> None:
    """Remember ``home``'s place for this command (``None``: back to SQLite); ``piw.store.pg.place.use`` calls it."""
    if place is None:
        _PLACES.pop(_key(home), None)
    else:
        _PLACES[_key(home)] = place


def register_mirrors(mirrors: Mirrors, home: Path) -> None:
    """Remember a mirror set by its root, so a bundle's path finds it (:func:`mirrors_at`) and the home it belongs
    to (:func:`home_of`)."""
    _ROOTS[str(mirrors.root)] = mirrors
    _HOMES[str(mirrors.root)] = home


def unregister_mirrors(root: Path) -> None:
    _ROOTS.pop(str(root), None)
    _HOMES.pop(str(root), None)


def home_of(root: Path) -> Path:
    """The ``PIW_HOME`` whose runs live under ``root`` (a bundle's ``path.parent.parent``): the home itself, or for a
    mirror root ``PIW_HOME/pg/<database id>`` the home it mirrors for, whose ``config.toml`` names the secrets."""
    return _HOMES.get(os.fspath(root), root) if _HOMES else root


def registered(home: Path) -> Place | None:
    return _PLACES.get(_key(home))


def database_place(home: Path) -> Place | None:
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
        import logging  # only on this path: ``piw --help`` imports this module and nothing else logs here

        logging.getLogger(__name__).warning("mirrors not refreshed: %s", exc)
