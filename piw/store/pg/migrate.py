"""Numbered SQL migrations of the PostgreSQL schema, each applied once under an advisory lock
(``docs/many-machines.md``, "Migrations").

- The files ship in the package (``piw/store/pg/migrations/NNNN_name.sql``); their SHA-256 is recorded in
  ``schema_migrations`` with the piw version that applied them. Each file's first line says its kind:
  ``-- kind: expand`` (additive: older piws keep working) or ``-- kind: contract`` (older piws must stop).
- Each migration runs in one transaction that first takes ``pg_advisory_xact_lock`` on the schema's migration key
  and re-reads what is applied, so four ``piw db migrate`` at once apply each file exactly once. A file that builds
  an index ``CONCURRENTLY`` (which no transaction may) runs statement by statement in autocommit under the session
  form of the same lock, after dropping any invalid index a failed run left; on a schema being created it is
  applied in the creating transaction with a plain ``CREATE INDEX`` (nobody reads the schema yet).
- An empty schema is created on first use (:func:`create_if_empty`, under the same lock); anything else needs an
  explicit ``piw db migrate``, so no command migrates a schema that other hosts are using.
- The window: this piw works on a schema whose version (the highest applied) is at least :data:`SCHEMA_MIN` and
  whose highest *contract* migration is at most :data:`SCHEMA_MAX`. Outside it, every command stops with one line
  (``StateSchemaMismatch``, exit 2) before it changes anything.
- ``--contract`` applies contract migrations, and refuses while ``hosts`` lists a live host (seen within
  :data:`LIVE_HOST_MS`) whose piw knows fewer migrations than the one it would apply.
"""

from __future__ import annotations

import hashlib
import os
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from piw.errors import StateSchemaMismatch, UsageError

if TYPE_CHECKING:
    from piw.store.pg.setting import DatabaseSetting


class Migratable(Protocol):
    """What migrating needs of ``piw.store.pg.connection.PgDatabase`` (named here so the two modules do not import
    each other: the connection migrates on open)."""

    @property
    def setting(self) -> DatabaseSetting: ...

    def connection(self) -> AbstractContextManager[Any]: ...

    def autocommit(self) -> AbstractContextManager[Any]: ...


SCHEMA_MIN = 1
"""The lowest schema version this piw's code works on."""
SCHEMA_MAX = 6
"""The highest schema version this piw knows (its newest migration file)."""
TEST_MIGRATIONS_ENV = "PIW_TEST_MIGRATIONS"
"""Tests only: a folder of migration files that stands in for the shipped ones (a newer piw)."""
LIVE_HOST_MS = 60_000
"""A ``hosts`` row seen this recently counts as a live host for ``migrate --contract``."""

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_KIND = re.compile(r"^-- kind: (expand|contract)\s*$")
_CONCURRENTLY = re.compile(r"(CREATE\s+(?:UNIQUE\s+)?INDEX)\s+CONCURRENTLY\b", re.IGNORECASE)
_BOOTSTRAP = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (version int PRIMARY KEY, name text NOT NULL, "
    "sha256 text NOT NULL, kind text NOT NULL DEFAULT 'expand', applied_at bigint NOT NULL, "
    "piw_version text NOT NULL)"
)


@dataclass(frozen=True)
class Migration:
    """One numbered SQL file."""

    version: int
    name: str
    sql: str
    kind: Literal["expand", "contract"]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()

    @property
    def concurrent(self) -> bool:
        """Builds an index ``CONCURRENTLY``: not possible inside a transaction, so run statement by statement."""
        return _CONCURRENTLY.search(self.sql) is not None

    def statements(self) -> list[str]:
        """The file's statements (split at a ``;`` that ends a line), for a migration run outside a transaction."""
        parts = re.split(r";[ \t]*(?:--[^\n]*)?\n", self.sql + "\n")
        found = []
        for part in parts:
            code = "\n".join(line for line in part.splitlines() if not line.lstrip().startswith("--")).strip()
            if code:
                found.append(code)
        return found

    def in_transaction(self) -> str:
        """The SQL for a schema nobody uses yet (its creation): ``CONCURRENTLY`` dropped, one transaction."""
        return _CONCURRENTLY.sub(lambda match: match.group(1), self.sql)


@dataclass(frozen=True)
class SchemaState:
    """What a schema holds: the applied versions, their digests, and the window they allow."""

    applied: dict[int, str]
    """version → sha256 of every applied migration."""
    contract_floor: int
    """The highest applied contract migration (0: none); a piw needs ``SCHEMA_MAX`` at least this."""

    @property
    def version(self) -> int:
        return max(self.applied, default=0)

    @property
    def empty(self) -> bool:
        return not self.applied


def parse_migrations(files: dict[str, str]) -> list[Migration]:
    """Migrations from ``{file name: text}``, in order; ``ValueError`` for a misnamed or unnumbered file."""
    found: list[Migration] = []
    for name, text in files.items():
        match = _FILE.match(name)
        if match is None:
            raise ValueError(f"migration file {name!r} is not named NNNN_name.sql")
        first = text.splitlines()[0] if text else ""
        kind = _KIND.match(first)
        if kind is None:
            raise ValueError(f"migration {name} does not start with '-- kind: expand' or '-- kind: contract'")
        found.append(Migration(int(match.group(1)), match.group(2), text, kind.group(1)))  # type: ignore[arg-type]
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    # Numbers are handed out per feature before the files exist, so a piw may ship 1 and 6 without 2-5 yet; each
    # is applied once by its number whatever the others, and a number given twice is the mistake to catch.
    if len(set(versions)) != len(versions) or (versions and versions[0] != 1):
        raise ValueError(f"migrations must be numbered from 1, each number once (found {versions})")
    return found


def shipped() -> list[Migration]:
    """The migration files in this piw's package."""
    folder = resources.files("piw.store.pg") / "migrations"
    files = {
        item.name: item.read_text(encoding="utf-8") for item in folder.iterdir() if item.name.endswith(".sql")
    }
    return parse_migrations(files)


def from_directory(path: Path) -> list[Migration]:
    """Migrations from a folder (tests: a piw that knows more files than this one)."""
    return parse_migrations({item.name: item.read_text(encoding="utf-8") for item in path.glob("*.sql")})


@dataclass(frozen=True)
class Window:
    """The schema versions a piw works with: it knows ``migrations``; its code needs at least ``minimum``."""

    migrations: tuple[Migration, ...]
    minimum: int

    @property
    def maximum(self) -> int:
        return max((migration.version for migration in self.migrations), default=0)

    @classmethod
    def of_this_piw(cls) -> Window:
        """The shipped files and :data:`SCHEMA_MIN`; under :data:`TEST_MIGRATIONS_ENV` (tests only) the files of
        that folder, as a newer piw would ship them, its minimum raised to its newest contract migration."""
        folder = os.environ.get(TEST_MIGRATIONS_ENV)
        if folder:
            migrations = from_directory(Path(folder))
            floor = max((m.version for m in migrations if m.kind == "contract"), default=0)
            return cls(tuple(migrations), max(SCHEMA_MIN, floor))
        return cls(tuple(shipped()), SCHEMA_MIN)


def _lock(conn: Any, schema: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"piw.migrate:{schema}",))


def read_state(conn: Any, schema: str) -> SchemaState:
    """The schema's migrations (an empty state when the schema or its ``schema_migrations`` does not exist)."""
    # (pg_tables through the statement's snapshot: to_regclass reads the catalog cache, which may not yet show a
    # table another process committed while this one waited for the migration lock)
    exists = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = 'schema_migrations')",
        (schema,),
    ).fetchone()
    if not exists or not exists[0]:
        return SchemaState({}, 0)
    rows = conn.execute("SELECT version, sha256, kind FROM schema_migrations").fetchall()
    floor = max((int(version) for version, _, kind in rows if kind == "contract"), default=0)
    return SchemaState({int(version): str(digest) for version, digest, _ in rows}, floor)


def check_window(state: SchemaState, window: Window, where: str) -> None:
    """``StateSchemaMismatch`` (one line, exit 2) when this piw cannot work on ``state``; nothing is changed."""
    if state.contract_floor > window.maximum:
        raise StateSchemaMismatch(
            f"The database {where} has schema version {state.version}, which needs a newer piw (this one works "
            f"with versions {window.minimum}..{window.maximum}); upgrade piw on this host."
        )
    if state.version < window.minimum:
        raise StateSchemaMismatch(
            f"The database {where} has schema version {state.version}; this piw needs {window.minimum} or later. "
            "Run 'piw db migrate' once (with every host stopped or upgraded)."
        )
    for migration in window.migrations:
        digest = state.applied.get(migration.version)
        if digest is not None and digest != migration.sha256:
            raise StateSchemaMismatch(
                f"The database {where} applied migration {migration.version} ({migration.name}) with other content "
                "than this piw ships; it was left untouched. Use the piw version that created it."
            )


def _apply(conn: Any, migration: Migration, piw_version: str) -> None:
    conn.execute(migration.in_transaction())
    _record(conn, migration, piw_version)


def _record(conn: Any, migration: Migration, piw_version: str) -> None:
    conn.execute(
        "INSERT INTO schema_migrations (version, name, sha256, kind, applied_at, piw_version) "
        "VALUES (%s, %s, %s, %s, now_ms(), %s)",
        (migration.version, migration.name, migration.sha256, migration.kind, piw_version),
    )


def _piw_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("piw")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "0"


def create_if_empty(db: Migratable, window: Window | None = None) -> bool:
    """Create an empty (or missing) schema with every migration of this piw; ``False`` when it already has
    migrations (then only ``piw db migrate`` changes it)."""
    window = window or Window.of_this_piw()
    schema = db.setting.schema
    with db.connection() as conn:
        if not read_state(conn, schema).empty:
            return False
    applied = False
    with db.connection() as conn:
        _lock(conn, schema)
        if not read_state(conn, schema).empty:
            return False
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn.execute(_BOOTSTRAP)
        for migration in window.migrations:
            _apply(conn, migration, _piw_version())
            applied = True
    return applied


@dataclass(frozen=True)
class MigrateResult:
    applied: list[int]
    version: int


def migrate(db: Migratable, *, contract: bool = False, window: Window | None = None) -> MigrateResult:
    """Apply every pending migration this piw knows, each once, each in its own locked transaction.

    A contract migration needs ``contract=True`` (``UsageError`` otherwise, before anything is applied past it) and
    no live host whose piw knows fewer migrations (``UsageError`` naming the host)."""
    window = window or Window.of_this_piw()
    schema = db.setting.schema
    with db.connection() as conn:
        state = read_state(conn, schema)
    if state.contract_floor > window.maximum:
        check_window(state, window, db.setting.redacted())
    applied: list[int] = []
    version = state.version
    for migration in window.migrations:
        if migration.version in state.applied:
            continue
        if migration.concurrent:
            if not _apply_concurrently(db, migration, contract):
                continue
        else:
            with db.connection() as conn:
                _lock(conn, schema)
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
                conn.execute(_BOOTSTRAP)
                current = read_state(conn, schema)
                if migration.version in current.applied:
                    version = current.version
                    continue  # another process applied it while we waited for the lock
                if migration.kind == "contract":
                    _check_contract(conn, migration, contract, db.setting.redacted())
                _apply(conn, migration, _piw_version())
        applied.append(migration.version)
        version = migration.version
    with db.connection() as conn:
        check_window(read_state(conn, schema), window, db.setting.redacted())
    return MigrateResult(applied, version)


def _apply_concurrently(db: Migratable, migration: Migration, contract: bool) -> bool:
    """A migration that builds indexes ``CONCURRENTLY``: statement by statement in autocommit, under the session
    form of the migration lock, after dropping any invalid index a failed run left in the schema; ``False`` when
    another process applied it meanwhile."""
    schema = db.setting.schema
    key = f"piw.migrate:{schema}"
    with db.autocommit() as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
        try:
            if migration.version in read_state(conn, schema).applied:
                return False
            if migration.kind == "contract":
                _check_contract(conn, migration, contract, db.setting.redacted())
            invalid = conn.execute(
                "SELECT format('%%I.%%I', n.nspname, c.relname) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE NOT i.indisvalid AND n.nspname = %s",
                (schema,),
            ).fetchall()
            for (name,) in invalid:
                conn.execute(f"DROP INDEX IF EXISTS {name}")
            for statement in migration.statements():
                conn.execute(statement)
            _record(conn, migration, _piw_version())
            return True
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))


def _check_contract(conn: Any, migration: Migration, contract: bool, where: str) -> None:
    name = f"{migration.version:04d}_{migration.name}"
    if not contract:
        raise UsageError(
            f"Migration {name} of {where} is a contract migration: older piw hosts stop working after it. Upgrade "
            "every host, then run 'piw db migrate --contract'."
        )
    older = conn.execute(
        "SELECT runner_id, piw_version FROM hosts WHERE seen_at > now_ms() - %s "
        "AND (schema_max IS NULL OR schema_max < %s) ORDER BY runner_id LIMIT 1",
        (LIVE_HOST_MS, migration.version),
    ).fetchone()
    if older is not None:
        raise UsageError(
            f"Migration {name} of {where} would stop host {older[0]} (piw {older[1] or '?'}), which is live and "
            "does not know it; upgrade or stop that host, then run 'piw db migrate --contract' again."
        )
