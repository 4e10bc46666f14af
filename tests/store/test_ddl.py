"""The schema piw writes without sqlite-utils is the very schema sqlite-utils wrote: the switch changed no file.

(It was made for start-up time, which bench/bench_first_request.py measures.)
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlite_utils

from piw.store.db.database import open_database
from piw.store.db.schema import SCHEMA_INFO, TABLES


def _schema(conn: sqlite3.Connection) -> list[tuple[str, str, str | None]]:
    query = "SELECT type, name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
    return [tuple(row) for row in conn.execute(query)]


def test_a_new_home_database_has_the_tables_sqlite_utils_would_create(tmp_path: Path) -> None:
    expected = sqlite3.connect(":memory:")
    utils = sqlite_utils.Database(expected, execute_plugins=False)
    for name, spec in {**TABLES, "schema_info": SCHEMA_INFO}.items():
        utils[name].create(
            spec.columns,
            pk=spec.pk,
            not_null=spec.not_null or None,
            defaults=spec.defaults or None,
            if_not_exists=True,
        )
    database = open_database(tmp_path)
    created = sqlite3.connect(database.path)
    try:
        assert _schema(created) == _schema(expected)
        row = created.execute("SELECT schema_id FROM schema_info WHERE id = 1").fetchone()
        assert row == ("piw.sqlite.v1",)
    finally:
        created.close()
        expected.close()
