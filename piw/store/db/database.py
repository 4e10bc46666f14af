"""The piw database, ``$PIW_HOME/piw.sqlite``: runs index, run queue and claims, outbox, decisions, idempotency.

The trace stays the only authoritative record of what a run did; this database holds what several processes must
agree on *about* runs (who may write one, what is queued, what a person answered) and a cache of run summaries
(``docs/detached.md``, "What the database holds"). Access:

- ``sqlite3.connect(path, isolation_level=None, timeout=5.0)``, one connection per thread, each setting
  ``journal_mode=WAL`` (which must answer ``wal``), ``synchronous=FULL``, ``foreign_keys=ON``, ``busy_timeout=5000``;
- every mutation is one explicit ``BEGIN IMMEDIATE … COMMIT`` (:meth:`Database.transaction`), waiting with a
  visible line while another process holds the lock (``piw.store.db.busy``);
- times are integer wall-clock epoch milliseconds (:func:`now_ms`);
- the tables are created through sqlite-utils ``create(..., if_not_exists=True)``, partial indexes with raw DDL;
- ``schema_info`` holds ``(1, "piw.sqlite.v1", ddl_sha256)``. Any other database raises ``StateSchemaMismatch``
  before a byte of it is changed; there are no migrations in alpha, so changing the tables or indexes of
  ``piw.store.db.schema`` changes the digest and an older file must be moved aside (the run index is rebuilt from the
  bundles, ``piw.store.db.index``).

sqlite-utils costs ~130 ms to import, so it is imported only when a database is created; an existing database
with a matching ``schema_info`` is used through plain ``sqlite3`` (the queries are hand-written SQL anyway).
The file and its ``-wal``/``-shm`` companions are private (0600), like everything under ``PIW_HOME``. A file
this process cannot write (a read-only home) is opened ``mode=ro`` and never reported as foreign: every write
then says the home cannot be written (``piw.store.db.access``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from piw.errors import PiwError, StateSchemaMismatch, StoreError
from piw.store.db.access import connect_read_only, is_unwritable, may_write, unwritable
from piw.store.db.busy import BUSY_TIMEOUT_MS, begin
from piw.store.db.ddl import create_table_sql
from piw.store.db.schema import INDEXES, SCHEMA_ID, SCHEMA_INFO, TABLES, ddl_sha256

DATABASE_NAME = "piw.sqlite"

Clock = Callable[[], int]
"""Wall-clock epoch milliseconds; injectable so lease tests never sleep."""


def now_ms() -> int:
    """Integer wall-clock epoch milliseconds (the unit of every time column)."""
    return time.time_ns() // 1_000_000


def database_path(home: Path) -> Path:
    return home / DATABASE_NAME


def read_only_connection(home: Path, timeout: float = 1.0) -> sqlite3.Connection | None:
    """A read-only connection to ``home``'s database (``mode=ro``: it never creates, changes or checks the file),
    for readers that must not write; ``None`` when there is no database or it cannot be opened."""
    path = database_path(home)
    if not path.is_file():
        return None
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)
    except sqlite3.Error:
        return None


def _mismatch(path: Path, found: str) -> StateSchemaMismatch:
    return StateSchemaMismatch(
        f"{path} is not a {SCHEMA_ID} database ({found}); it was left untouched. Back it up and move it aside "
        f"(e.g. 'mv {path} {path}.bak'): piw then creates a new one and rebuilds the run index from the run "
        "bundles."
    )


def _check_existing(path: Path) -> bool:
    """Whether ``path`` already holds our schema (``False``: empty, create it). Reads only, through ``mode=ro``.

    Raises ``StateSchemaMismatch`` for a file that is not SQLite, has foreign tables, or another schema id or DDL.
    """
    try:
        if path.stat().st_size == 0:
            return False
    except FileNotFoundError:
        return False
    probe = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    try:
        names = {row[0] for row in probe.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not names:
            return False
        if "schema_info" not in names:
            raise _mismatch(path, "no schema_info table")
        row = probe.execute("SELECT schema_id, ddl_sha256 FROM schema_info WHERE id = 1").fetchone()
    except sqlite3.DatabaseError as exc:
        if is_unwritable(exc):
            raise unwritable(path, f"piw.sqlite: {exc}") from None
        raise _mismatch(path, str(exc)) from None
    finally:
        probe.close()
    if row is None:
        raise _mismatch(path, "schema_info is empty")
    if row[0] != SCHEMA_ID:
        raise _mismatch(path, f"schema {row[0]!r}")
    if row[1] != ddl_sha256():
        raise _mismatch(path, "written by another version of piw: its table definitions differ")
    return True


def _configure(conn: sqlite3.Connection, path: Path) -> None:
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        raise StoreError(f"{path}: SQLite refused WAL journal mode ({mode!r}); piw needs a local filesystem.")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def _tighten(path: Path) -> None:
    """0600 on the database and its ``-wal``/``-shm`` files (SQLite copies the main file's mode; be sure)."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            try:
                if os.stat(f"{path}{suffix}").st_mode & 0o7177:
                    os.chmod(f"{path}{suffix}", 0o600)
            except PermissionError:
                pass  # not ours to change
            except OSError as exc:
                if exc.errno != errno.EROFS:  # a read-only home is read as it is
                    raise


class Database:
    """One ``piw.sqlite``: a connection per thread, explicit ``BEGIN IMMEDIATE`` transactions.

    Open it with :func:`open_database` (which shares one instance per file in a process).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._gate = threading.RLock()
        """Held while the file is reopened after it was replaced: no thread connects to it half-restored."""
        self.on_replaced: list[Callable[[Database], None]] = []
        """Called (inside the gate) once a deleted or replaced file was opened afresh: a host puts back what it
        holds (``piw.run.host_recovery``)."""
        self._pid = os.getpid()
        self.read_only = not may_write(path)
        """This process cannot write the file (a read-only home): it is read through ``mode=ro`` connections and
        every transaction raises ``HomeUnavailable`` (``piw.store.db.access``)."""
        self._initialise()
        self.identity = _identity(path)
        """The file's (device, inode) when opened: a file moved aside or replaced is opened afresh."""

    # ---- connections ------------------------------------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (created and configured on first use)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _connect(self) -> sqlite3.Connection:
        with self._gate:
            return self._connect_now()

    def _connect_now(self) -> sqlite3.Connection:
        try:
            if self.read_only:
                conn = connect_read_only(self.path, 5.0)
            else:
                conn = sqlite3.connect(self.path, isolation_level=None, timeout=5.0, check_same_thread=False)
                _configure(conn, self.path)
        except sqlite3.DatabaseError as exc:
            if is_unwritable(exc):
                raise unwritable(self.path, f"piw.sqlite: {exc}") from None
            raise _mismatch(self.path, str(exc)) from None
        with self._lock:
            self._all.append(conn)
        return conn

    def utils(self) -> Any:
        """This thread's connection wrapped as a sqlite-utils ``Database`` (imported on demand)."""
        from sqlite_utils import Database as UtilsDatabase

        return UtilsDatabase(self.connection(), execute_plugins=False)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE … COMMIT`` on this thread's connection; rolled back on any exception.

        A read-only database refuses before anything starts (``HomeUnavailable``: the home cannot be written)."""
        if self.read_only:
            raise unwritable(self.path)
        conn = self.connection()
        begin(conn, self.path)
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        """Rows of a read-only statement, as ``sqlite3.Row`` (columns by name)."""
        conn = self.connection()
        cursor = conn.execute(sql, params)
        cursor.row_factory = sqlite3.Row
        return list(cursor.fetchall())

    def close(self) -> None:
        """Close every connection this instance opened (all threads)."""
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()

    # ---- a file deleted or replaced under this process --------------------------------------------------

    def replaced(self) -> bool:
        """Whether the file at :attr:`path` is no longer the one opened (deleted, moved aside, replaced)."""
        return _identity(self.path) != self.identity

    def recover(self) -> bool:
        """Open the file afresh if it was deleted or replaced (creating it), then call :attr:`on_replaced`;
        whether it had been. Connections to the old file are closed; until the hooks ran, no thread of this
        process connects to the new one."""
        with self._gate:
            if not self.replaced():
                return False
            self.close()
            self.read_only = not may_write(self.path)
            self._initialise()
            self.identity = _identity(self.path)
            for hook in list(self.on_replaced):
                try:
                    hook(self)
                except Exception:  # one hook failing must not leave the others undone
                    logging.getLogger(__name__).exception("restoring %s after it was replaced", self.path)
            return True

    # ---- creation and the schema check ----------------------------------------------------------------

    def _initialise(self) -> None:
        path = self.path
        if self.read_only:
            if not _check_existing(path):
                raise unwritable(path, "there is no piw.sqlite and none can be created")
            self.created = False
            self.connection()
            return
        if _check_existing(path):
            self.created = False
            self.connection()
            _tighten(path)
            return
        if not path.exists():
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        conn = self.connection()
        _tighten(path)
        with self.transaction():
            # Another process may have created it between our check and the lock: check again inside.
            existing = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_info'"
            ).fetchone()
            if existing is not None:
                row = conn.execute("SELECT schema_id, ddl_sha256 FROM schema_info WHERE id = 1").fetchone()
                if row is None or tuple(row) != (SCHEMA_ID, ddl_sha256()):
                    raise _mismatch(path, "another schema was created concurrently")
                self.created = False
                return
            for name, spec in TABLES.items():
                conn.execute(create_table_sql(name, spec))
            for statement in INDEXES:
                conn.execute(statement)
            conn.execute(create_table_sql("schema_info", SCHEMA_INFO))
            conn.execute(
                "INSERT INTO schema_info (id, schema_id, ddl_sha256) VALUES (1, ?, ?)",
                (SCHEMA_ID, ddl_sha256()),
            )
        self.created = True
        _tighten(path)


_OPEN: dict[Path, Database] = {}
_OPEN_LOCK = threading.Lock()


def open_database(home: Path) -> Database:
    """The database of ``home``, created on first use; one shared instance per file in this process.

    Raises ``StateSchemaMismatch`` (one line, exit 2) for a corrupt or foreign ``piw.sqlite``.
    """
    if not home.is_dir():  # an existing home is left as it is (piw_home tightened it; it may be read-only)
        from piw.store.bundle import ensure_private_dir  # (with the fold: not for a home that exists)

        ensure_private_dir(home)
    path = database_path(home)
    with _OPEN_LOCK:
        db = _OPEN.get(path)
        if db is not None and db._pid == os.getpid():
            db.recover()  # a file deleted or replaced meanwhile is opened afresh, in place
            return db
        if db is not None:
            db.close()
        db = Database(path)
        _OPEN[path] = db
        return db


def close_databases() -> None:
    """Close every database this process opened (tests; a process exiting needs nothing)."""
    with _OPEN_LOCK:
        dbs = list(_OPEN.values())
        _OPEN.clear()
    for db in dbs:
        db.close()


def close_database(home: Path) -> None:
    """Close the database of ``home`` if this process opened it (``piw test`` closes each throwaway home's before
    deleting it, so a long suite does not keep one open file per case)."""
    with _OPEN_LOCK:
        db = _OPEN.pop(database_path(home), None)
    if db is not None:
        db.close()


def holds_current_schema(path: Path) -> bool:
    """Whether the database file at ``path`` holds exactly this piw's schema (``False``: empty, foreign, damaged)."""
    try:
        return path.is_file() and _check_existing(path)
    except PiwError:
        return False
