"""What differs between the SQL databases the run database may live in: placeholders and "insert unless present".

Statements are written once, with ``?`` placeholders, and the row operations the queue, the decisions and the
outbox share (``piw.store.db.rows``, ``piw.store.db.idempotency``) pass them through a :class:`Dialect`: SQLite
(``docs/detached.md``, "What the database holds") and PostgreSQL (``docs/many-machines.md``), which spells the
placeholder ``%s`` and "insert unless present" as ``INSERT … ON CONFLICT DO NOTHING``; its connections (psycopg's)
only need what :class:`Connection` lists. JSON values are stored as text in both (:func:`dumps`, :func:`loads`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class Cursor(Protocol):
    """What a statement's result offers the row operations."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """A connection inside a transaction (``sqlite3.Connection`` is one)."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...


@dataclass(frozen=True)
class Dialect:
    """How one database spells placeholders and an insert that leaves an existing row alone."""

    name: str
    placeholder: str
    insert_ignoring: str
    """``{table}``, ``{columns}`` and ``{marks}`` filled in: an insert that skips a row whose key exists."""

    def sql(self, statement: str) -> str:
        """``statement`` (written with ``?`` placeholders) in this dialect."""
        return statement if self.placeholder == "?" else statement.replace("?", self.placeholder)

    def marks(self, count: int) -> str:
        return ", ".join([self.placeholder] * count)

    def insert(self, table: str, columns: Sequence[str], *, ignore: bool = False) -> str:
        """``INSERT INTO table (columns) VALUES (…)``, or the dialect's insert that keeps an existing row."""
        names, marks = ", ".join(columns), self.marks(len(columns))
        if ignore:
            return self.insert_ignoring.format(table=table, columns=names, marks=marks)
        return f"INSERT INTO {table} ({names}) VALUES ({marks})"


SQLITE = Dialect("sqlite", "?", "INSERT OR IGNORE INTO {table} ({columns}) VALUES ({marks})")
POSTGRES = Dialect(
    "postgres", "%s", "INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT DO NOTHING"
)


def dumps(value: Any) -> str:
    """The stored text of a JSON column (sorted keys, compact)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def loads(text: str | None) -> Any:
    """A JSON column's value (``None`` stays ``None``)."""
    return None if text is None else json.loads(text)
