"""A table's spec (:class:`TableSpec`) and its ``CREATE TABLE`` text, written without sqlite-utils.

Creating a home's ``piw.sqlite`` used to import sqlite-utils (about a fifth of a second of start-up on a loaded
machine) just to spell these statements, on the way to a new home's first model request
(``bench/bench_first_request.py`` measures it).
The text is the very text sqlite-utils writes for the same spec (``tests/store/test_ddl.py`` compares them
byte for byte), so a database created either way is the same file schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TableSpec:
    """One table as sqlite-utils creates it: columns (name → Python type), primary key, constraints."""

    columns: dict[str, type]
    pk: str | tuple[str, ...]
    not_null: tuple[str, ...] = ()
    defaults: dict[str, Any] = field(default_factory=dict)

    def canonical(self) -> dict[str, Any]:
        return {
            "columns": [[name, kind.__name__] for name, kind in self.columns.items()],
            "pk": list(self.pk) if isinstance(self.pk, tuple) else self.pk,
            "notNull": sorted(self.not_null),
            "defaults": dict(sorted(self.defaults.items())),
        }


_TYPES: dict[type, str] = {str: "TEXT", int: "INTEGER", float: "REAL", bytes: "BLOB"}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"no SQL literal for the default {value!r}")
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def create_table_sql(name: str, spec: TableSpec) -> str:
    """``CREATE TABLE IF NOT EXISTS`` for ``spec``, laid out as sqlite-utils lays it out."""
    compound = isinstance(spec.pk, tuple)
    lines = []
    for column, kind in spec.columns.items():
        line = f"   {_quote(column)} {_TYPES[kind]}"
        if not compound and column == spec.pk:
            line += " PRIMARY KEY"
        if column in spec.not_null:
            line += " NOT NULL"
        if column in spec.defaults:
            line += f" DEFAULT {_literal(spec.defaults[column])}"
        lines.append(line)
    if compound:
        lines.append(f"   PRIMARY KEY ({', '.join(_quote(column) for column in spec.pk)})")
    body = ",\n".join(lines)
    return f"CREATE TABLE IF NOT EXISTS {_quote(name)} (\n{body}\n)"
