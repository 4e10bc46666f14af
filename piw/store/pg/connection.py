"""One PostgreSQL database for many piw hosts: a connection pool on one schema (``docs/many-machines.md``).

psycopg (the ``piw[postgres]`` extra) is imported here, and only when a database is configured: ``piw --help`` and
every SQLite-mode command never load it. Every connection:

- has ``search_path`` set to the schema alone, so the schema's names (``now_ms()``, the tables) are unqualified;
- sets ``idle_in_transaction_session_timeout = 5s``, ``lock_timeout = 5s`` and ``statement_timeout = 30s``, so a
  frozen client holding a row lock is cut off instead of blocking a takeover;
- has autocommit off: :meth:`PgDatabase.connection` is a transaction, committed when the block ends (rolled back
  on an exception).

Connection failures are :class:`~piw.errors.DatabaseUnavailable` with the URL redacted and the password scrubbed
from the driver's message. Opening an empty schema creates it (every migration, under the migration lock);
otherwise the schema must be inside this piw's window (``piw.store.pg.migrate``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from piw.errors import DatabaseUnavailable
from piw.store.pg.setting import DatabaseSetting

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

POOL_MAX = 10
"""The pool's default size: ``min(concurrency, 8) + 2`` for a host (``docs/many-machines.md``, "Connections")."""
CONNECT_TIMEOUT_S = 5
SESSION_SETTINGS = {
    "idle_in_transaction_session_timeout": "5s",
    "lock_timeout": "5s",
    "statement_timeout": "30s",
}


def _driver() -> tuple[Any, Any]:
    """``(psycopg, psycopg_pool)``, or ``DatabaseUnavailable`` saying how to install them."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise DatabaseUnavailable(
            f"A PostgreSQL database is configured, but its driver is not installed ({exc.name}); install it with "
            "pip install 'piw[postgres]'."
        ) from None
    return psycopg, psycopg_pool


def _options(schema: str) -> str:
    settings = [f"-c search_path={schema}"] + [
        f"-c {name}={value}" for name, value in SESSION_SETTINGS.items()
    ]
    return " ".join(settings)


def unavailable(
    setting: DatabaseSetting, exc: BaseException, doing: str = "connect to"
) -> DatabaseUnavailable:
    """A one-line error for a driver failure: the URL redacted, the password scrubbed from the driver's text."""
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return DatabaseUnavailable(f"Cannot {doing} the database {setting.redacted()}: {setting.scrub(detail)}")


class PgDatabase:
    """A pool of connections to one schema of one PostgreSQL database; open it with :meth:`open`."""

    def __init__(self, setting: DatabaseSetting, pool: psycopg_pool.ConnectionPool) -> None:
        self._setting = setting
        self._pool = pool
        self._closed = False

    @classmethod
    def open(cls, setting: DatabaseSetting, *, migrate: bool = True, pool_size: int = POOL_MAX) -> PgDatabase:
        """Connect (``DatabaseUnavailable`` when the server cannot be reached); with ``migrate``, create an empty
        schema and check the schema window (``StateSchemaMismatch`` outside it, nothing changed)."""
        psycopg, psycopg_pool = _driver()
        try:
            given = psycopg.conninfo.conninfo_to_dict(setting.url).get("options")
        except psycopg.ProgrammingError as exc:
            raise unavailable(setting, exc, "read the URL of") from None
        options = _options(setting.schema) if not given else f"{given} {_options(setting.schema)}"
        kwargs = {"options": options, "connect_timeout": CONNECT_TIMEOUT_S}
        try:  # one direct connection first: its error is the driver's own, not a pool timeout
            psycopg.connect(setting.url, **kwargs).close()
        except psycopg.Error as exc:
            raise unavailable(setting, exc) from None
        pool = psycopg_pool.ConnectionPool(
            setting.url,
            min_size=1,
            max_size=max(pool_size, 1),
            kwargs=kwargs,
            open=False,
            timeout=CONNECT_TIMEOUT_S * 2,
            name=f"piw-{setting.schema}",
        )
        try:
            pool.open(wait=True, timeout=CONNECT_TIMEOUT_S * 2)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            pool.close()
            raise unavailable(setting, exc) from None
        db = cls(setting, pool)
        _register(db)
        if migrate:
            try:
                from piw.store.pg.migrate import Window, check_window, create_if_empty, read_state

                if not create_if_empty(db):
                    with db.connection() as conn:
                        check_window(
                            read_state(conn, setting.schema), Window.of_this_piw(), setting.redacted()
                        )
            except BaseException:
                db.close()
                raise
        return db

    @property
    def setting(self) -> DatabaseSetting:
        return self._setting

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in a transaction (autocommit off): committed at the end, rolled back on error.

        A lost connection or an unreachable server becomes ``DatabaseUnavailable``; errors the server reports
        (SQL, lock timeouts, deadlocks) pass unchanged."""
        psycopg, psycopg_pool = _driver()
        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            if getattr(exc, "sqlstate", None) is not None:
                raise  # the server answered (a lock timeout, a deadlock, a cancel): not a lost connection
            raise unavailable(self._setting, exc, "use") from exc

    @contextlib.contextmanager
    def autocommit(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in autocommit mode, for one statement that is its own transaction (no ``COMMIT``
        round trip); it goes back to the pool with autocommit off."""
        with self.connection() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                conn.autocommit = False

    def server_now_ms(self) -> int:
        """The database clock, epoch milliseconds (``now_ms()``): the only clock leases are compared with."""
        with self.connection() as conn:
            found = conn.execute("SELECT now_ms()").fetchone()
        assert found is not None
        return int(found[0])

    def channel(self, kind: str) -> str:
        """The LISTEN/NOTIFY channel of this schema for ``kind`` (``trace``, ``queue``, ``flags``)."""
        return f"{self._setting.schema}_{kind}"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _unregister(self)
        with contextlib.suppress(Exception):
            self._pool.close()

    def __repr__(self) -> str:
        return f"PgDatabase({self._setting.redacted()!r}, schema={self._setting.schema!r})"


_OPEN: list[PgDatabase] = []
_OPEN_LOCK = threading.Lock()


def _register(db: PgDatabase) -> None:
    with _OPEN_LOCK:
        _OPEN.append(db)


def _unregister(db: PgDatabase) -> None:
    with _OPEN_LOCK, contextlib.suppress(ValueError):
        _OPEN.remove(db)


def close_pg_databases() -> None:
    """Close every pool this process opened (tests; a process exiting needs nothing)."""
    with _OPEN_LOCK:
        dbs = list(_OPEN)
    for db in dbs:
        db.close()
