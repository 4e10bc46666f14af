"""The PostgreSQL schema: created on first use, each numbered migration applied once (``docs/many-machines.md``,
"Migrations"). Real server from ``tests/support/pg.py``."""

from __future__ import annotations

from piw.store.pg.connection import PgDatabase
from piw.store.pg.migrate import SCHEMA_MAX, SCHEMA_MIN, read_state, shipped
from piw.store.pg.setting import DatabaseSetting
from tests.support.pg import PgServer

TABLES = {
    "schema_migrations", "run_queue", "run_bundles", "trace_events", "session_entries", "artifacts", "runs",
    "notifications", "human_decisions", "idempotency", "hosts",
}  # fmt: skip


def test_an_empty_schema_is_created_on_first_use(pg_server: PgServer, pg_setting: DatabaseSetting) -> None:
    db = PgDatabase.open(pg_setting)
    found = pg_server.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (pg_setting.schema,)
    )
    assert {name for (name,) in found} == TABLES
    with db.connection() as conn:
        state = read_state(conn, pg_setting.schema)
    assert state.version == SCHEMA_MAX == len(shipped()) and state.version >= SCHEMA_MIN
    rows = pg_server.execute(f'SELECT version, name, sha256 FROM "{pg_setting.schema}".schema_migrations')
    assert rows == [(1, "initial", shipped()[0].sha256)]
    # a second open finds it and changes nothing
    PgDatabase.open(pg_setting).close()
    assert pg_server.execute(f'SELECT count(*) FROM "{pg_setting.schema}".schema_migrations') == [(1,)]


def test_the_database_clock_is_the_servers(pg_setting: DatabaseSetting) -> None:
    import time

    db = PgDatabase.open(pg_setting)
    before = time.time_ns() // 1_000_000
    server = db.server_now_ms()
    after = time.time_ns() // 1_000_000
    assert before - 1_000 <= server <= after + 1_000  # same machine: the clocks agree to well within a second
    db.close()
