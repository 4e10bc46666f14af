"""API tokens of ``piw serve``: a name, a scope, an expiry, and only the SHA-256 of the secret (``docs/serve.md``).

``piw tokens create`` prints a token once; what is stored is its digest, so a copy of ``piw.sqlite`` (or of the
PostgreSQL schema, migration ``0004``) lets nobody in. A revoked token keeps its row (``piw tokens list`` shows
when it was revoked); creating a token under a revoked token's name replaces that row. The statements are written
once with ``?`` placeholders and run through the database's :class:`~piw.store.db.dialect.Dialect`, so SQLite mode
and database mode share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from piw.store.db.dialect import POSTGRES, SQLITE, Dialect

Scope = Literal["read", "answer", "operate"]
SCOPES: tuple[Scope, ...] = ("read", "answer", "operate")
"""Each scope allows what the ones before it allow: ``read`` reads, ``answer`` also answers and decides,
``operate`` also pauses, resumes, cancels, tops up budgets and starts runs."""


@dataclass(frozen=True)
class TokenRow:
    """One token as stored: never the secret itself."""

    name: str
    scope: Scope
    token_sha256: str
    created_at: int
    expires_at: int | None = None
    revoked_at: int | None = None

    def active(self, now: int) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def to_json(self, now: int) -> dict[str, Any]:
        state = "revoked" if self.revoked_at is not None else ("active" if self.active(now) else "expired")
        return {
            "name": self.name,
            "scope": self.scope,
            "createdAt": self.created_at,
            "expiresAt": self.expires_at,
            "revokedAt": self.revoked_at,
            "state": state,
        }


class TokenBook(Protocol):
    """Where a home's API tokens live: ``piw.sqlite``, or the configured PostgreSQL."""

    def add(self, row: TokenRow) -> bool:
        """Store a new token; ``False`` when an unrevoked token already has this name (nothing changes)."""
        ...

    def by_digest(self, token_sha256: str) -> TokenRow | None: ...

    def all(self) -> list[TokenRow]: ...

    def revoke(self, name: str, now: int) -> bool:
        """Mark the token revoked; ``False`` when no unrevoked token has this name."""
        ...

    def any_active(self, now: int) -> bool: ...


_COLUMNS = ("name", "scope", "token_sha256", "created_at", "expires_at", "revoked_at")


def _row(values: Any) -> TokenRow:
    name, scope, digest, created, expires, revoked = values
    return TokenRow(
        str(name),
        scope,
        str(digest),
        int(created),
        None if expires is None else int(expires),
        None if revoked is None else int(revoked),
    )


class SqlTokens:
    """:class:`TokenBook` over any database with ``transaction()`` and ``connection()`` (SQLite's ``Database``, or
    PostgreSQL's ``ClockedDatabase``, whose ``connection()`` runs each read in its own transaction) and the dialect
    to speak to it. Reads take no write lock: authentication reads on every request."""

    def __init__(self, db: Any, dialect: Dialect = SQLITE) -> None:
        self.db = db
        self.dialect = dialect

    def _sql(self, statement: str) -> str:
        return self.dialect.sql(statement)

    def add(self, row: TokenRow) -> bool:
        values = (row.name, row.scope, row.token_sha256, row.created_at, row.expires_at, None)
        with self.db.transaction() as conn:
            found = conn.execute(
                self._sql("SELECT revoked_at FROM api_tokens WHERE name = ?"), (row.name,)
            ).fetchone()
            if found is not None and found[0] is None:
                return False
            if found is not None:
                conn.execute(self._sql("DELETE FROM api_tokens WHERE name = ?"), (row.name,))
            conn.execute(self.dialect.insert("api_tokens", _COLUMNS), values)
        return True

    def by_digest(self, token_sha256: str) -> TokenRow | None:
        found = (
            self.db.connection()
            .execute(
                self._sql(f"SELECT {', '.join(_COLUMNS)} FROM api_tokens WHERE token_sha256 = ?"),
                (token_sha256,),
            )
            .fetchone()
        )
        return None if found is None else _row(found)

    def all(self) -> list[TokenRow]:
        rows = (
            self.db.connection()
            .execute(self._sql(f"SELECT {', '.join(_COLUMNS)} FROM api_tokens ORDER BY created_at, name"))
            .fetchall()
        )
        return [_row(row) for row in rows]

    def revoke(self, name: str, now: int) -> bool:
        with self.db.transaction() as conn:
            cursor = conn.execute(
                self._sql("UPDATE api_tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL"),
                (now, name),
            )
            return bool(cursor.rowcount)

    def any_active(self, now: int) -> bool:
        found = (
            self.db.connection()
            .execute(
                self._sql(
                    "SELECT 1 FROM api_tokens WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?) "
                    "LIMIT 1"
                ),
                (now,),
            )
            .fetchone()
        )
        return found is not None


def open_token_book(home: Path) -> TokenBook:
    """The tokens of ``home``: in ``piw.sqlite``, or in database mode in PostgreSQL (``docs/many-machines.md``)."""
    from piw.store.place import database_place

    place = database_place(home)
    if place is not None:
        from piw.store.pg.clock import ClockedDatabase

        return SqlTokens(ClockedDatabase(place.db), POSTGRES)
    from piw.store.db.database import open_database

    return SqlTokens(open_database(home), SQLITE)
