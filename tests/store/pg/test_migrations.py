"""The PostgreSQL schema: created on first use, each numbered migration applied once (``docs/many-machines.md``,
"Migrations"). Real server from ``tests/support/pg.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piw.errors import StateSchemaMismatch
from piw.store.pg.connection import PgDatabase
from piw.store.pg.migrate import (
    LIVE_HOST_MS,
    SCHEMA_MAX,
    SCHEMA_MIN,
    TEST_MIGRATIONS_ENV,
    read_state,
    shipped,
)
from piw.store.pg.setting import DatabaseSetting
from tests.support.cli import Cli
from tests.support.pg import PgServer

TABLES = {
    "schema_migrations", "run_queue", "run_bundles", "trace_events", "session_entries", "artifacts", "runs",
    "notifications", "human_decisions", "idempotency", "hosts",
    "api_tokens",  # 0004 (docs/serve.md)
    "rate_limits", "rate_limit_slots",  # 0002 (docs/rate-limits.md)
    "channel_posts", "answer_tokens", "channel_cursors",  # 0005 (docs/channels.md)
    "schedules", "schedule_fires",  # 0006 (docs/schedules.md)
}  # fmt: skip
SHIPPED = [migration.version for migration in shipped()]
LATEST = SHIPPED[-1]
"""This piw's newest migration (numbers may have gaps: each feature takes the number it was given)."""


def test_an_empty_schema_is_created_on_first_use(pg_server: PgServer, pg_setting: DatabaseSetting) -> None:
    db = PgDatabase.open(pg_setting)
    found = pg_server.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (pg_setting.schema,)
    )
    assert {name for (name,) in found} == TABLES
    with db.connection() as conn:
        state = read_state(conn, pg_setting.schema)
    assert state.version == SCHEMA_MAX == LATEST and state.version >= SCHEMA_MIN
    rows = pg_server.execute(
        f'SELECT version, name, sha256 FROM "{pg_setting.schema}".schema_migrations ORDER BY version'
    )
    assert rows == [(m.version, m.name, m.sha256) for m in shipped()] and rows[0][:2] == (1, "initial")
    # a second open finds it and changes nothing
    PgDatabase.open(pg_setting).close()
    count = pg_server.execute(f'SELECT count(*) FROM "{pg_setting.schema}".schema_migrations')
    assert count == [(len(SHIPPED),)]


def test_the_database_clock_is_the_servers(pg_setting: DatabaseSetting) -> None:
    import time

    db = PgDatabase.open(pg_setting)
    before = time.time_ns() // 1_000_000
    server = db.server_now_ms()
    after = time.time_ns() // 1_000_000
    assert before - 1_000 <= server <= after + 1_000  # same machine: the clocks agree to well within a second
    db.close()


# ---- piw db migrate: concurrency, the window, contract migrations (multi-host.md §5 test 15) -----------------


EXPAND = "-- kind: expand\nCREATE TABLE later_notes (id int PRIMARY KEY);\n"
CONTRACT = "-- kind: contract\nALTER TABLE run_queue DROP COLUMN concurrency_key;\n"


def newer_piw(folder: Path, *extra: str) -> dict[str, str]:
    """The environment of a piw that ships this piw's migrations and ``extra`` after them."""
    folder.mkdir(parents=True, exist_ok=True)
    for migration in shipped():
        (folder / f"{migration.version:04d}_{migration.name}.sql").write_text(migration.sql, encoding="utf-8")
    for offset, text in enumerate(extra, start=LATEST + 1):
        (folder / f"{offset:04d}_step{offset}.sql").write_text(text, encoding="utf-8")
    return {TEST_MIGRATIONS_ENV: str(folder)}


def url_of(setting: DatabaseSetting) -> str:
    return f"{setting.url}?schema={setting.schema}"


def snapshot(pg_server: PgServer, schema: str) -> list[tuple[object, ...]]:
    """What a refused command must leave as it was: the applied migrations and every column of the schema."""
    return pg_server.execute(
        f'SELECT version::text, sha256 FROM "{schema}".schema_migrations UNION ALL '
        "SELECT table_name::text, column_name::text FROM information_schema.columns WHERE table_schema = %s "
        "ORDER BY 1, 2",
        (schema,),
    )


def test_four_concurrent_migrates_apply_each_migration_once(
    cli: Cli, pg_server: PgServer, pg_setting: DatabaseSetting, tmp_path: Path
) -> None:
    env = newer_piw(tmp_path / "newer", EXPAND, EXPAND.replace("later_notes", "later_marks"))
    racers = [
        cli.popen("db", "migrate", "--database", url_of(pg_setting), "--json", env=env) for _ in range(4)
    ]
    results = []
    for racer in racers:
        out, err = racer.communicate(timeout=90)
        assert racer.returncode == 0, err
        results.append(json.loads(out))
    applied = sorted(version for result in results for version in result["applied"])
    assert applied == [*SHIPPED, LATEST + 1, LATEST + 2]
    assert {result["version"] for result in results} == {LATEST + 2}
    rows = pg_server.execute(f'SELECT version FROM "{pg_setting.schema}".schema_migrations ORDER BY version')
    assert rows == [(version,) for version in [*SHIPPED, LATEST + 1, LATEST + 2]]


def test_a_piw_outside_the_window_stops_with_one_line_and_changes_nothing(
    cli: Cli, pg_server: PgServer, pg_setting: DatabaseSetting, tmp_path: Path
) -> None:
    env = newer_piw(tmp_path / "newer", CONTRACT)
    done = cli("db", "migrate", "--contract", "--database", url_of(pg_setting), env=env)
    assert done.returncode == 0, done.stderr
    before = snapshot(pg_server, pg_setting.schema)
    for args in (("db", "migrate"), ("db", "status"), ("db", "migrate", "--contract")):
        refused = cli(*args, "--database", url_of(pg_setting))
        assert refused.returncode == 2
        (line,) = refused.stderr.strip().splitlines()
        assert f"schema version {LATEST + 1}, which needs a newer piw" in line and f"1..{LATEST}" in line
    with pytest.raises(StateSchemaMismatch):
        PgDatabase.open(pg_setting)
    assert snapshot(pg_server, pg_setting.schema) == before
    # and the other way round: a newer piw on a schema it needs migrated first
    older = DatabaseSetting(pg_setting.url, pg_setting.schema + "_old")
    PgDatabase.open(older).close()
    try:
        refused = cli("db", "status", "--database", url_of(older), env=env)
        assert (
            refused.returncode == 2 and f"needs {LATEST + 1} or later. Run 'piw db migrate'" in refused.stderr
        )
    finally:
        pg_server.execute(f'DROP SCHEMA "{older.schema}" CASCADE')


def test_contract_migrations_wait_for_older_live_hosts(
    cli: Cli, pg_server: PgServer, pg_setting: DatabaseSetting, tmp_path: Path
) -> None:
    PgDatabase.open(pg_setting).close()
    schema = pg_setting.schema
    pg_server.execute(
        f'INSERT INTO "{schema}".hosts (runner_id, seen_at, piw_version, schema_max) '
        f'VALUES (%s, "{schema}".now_ms(), %s, %s)',
        ("old-host:1:1", "0.1.0", LATEST),
    )
    env = newer_piw(tmp_path / "newer", CONTRACT)
    plain = cli("db", "migrate", "--database", url_of(pg_setting), env=env)
    assert (
        plain.returncode == 2 and "is a contract migration" in plain.stderr and "--contract" in plain.stderr
    )
    refused = cli("db", "migrate", "--contract", "--database", url_of(pg_setting), env=env)
    assert refused.returncode == 2 and "would stop host old-host:1:1 (piw 0.1.0)" in refused.stderr
    assert pg_server.execute(f'SELECT max(version) FROM "{schema}".schema_migrations') == [(LATEST,)]
    pg_server.execute(f'UPDATE "{schema}".hosts SET seen_at = seen_at - %s', (LIVE_HOST_MS + 1,))
    done = cli("db", "migrate", "--contract", "--database", url_of(pg_setting), env=env, timeout=60)
    assert done.returncode == 0 and f"Applied {LATEST + 1:04d}" in done.stdout


def test_options_in_the_url_are_kept_beside_piws_own(pg_setting: DatabaseSetting) -> None:
    setting = DatabaseSetting(pg_setting.url + "?options=-c%20work_mem%3D7MB", pg_setting.schema)
    db = PgDatabase.open(setting)
    with db.connection() as conn:
        shown = [
            conn.execute(f"SHOW {name}").fetchone()[0] for name in ("work_mem", "search_path", "lock_timeout")
        ]
    assert shown == ["7MB", pg_setting.schema, "5s"]
    db.close()


def test_hosts_starting_at_once_on_an_empty_schema_create_it_once(
    pg_server: PgServer, pg_setting: DatabaseSetting
) -> None:
    import threading

    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            PgDatabase.open(pg_setting, pool_size=1)
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    found = pg_server.execute(f'SELECT version FROM "{pg_setting.schema}".schema_migrations ORDER BY 1')
    assert found == [(version,) for version in SHIPPED]


CONCURRENT = "-- kind: expand\nCREATE UNIQUE INDEX CONCURRENTLY run_queue_ref ON run_queue (workflow_ref);\n"


def test_an_index_built_concurrently_replaces_the_invalid_one_a_failed_run_left(
    cli: Cli,
    pg_server: PgServer,
    pg_setting: DatabaseSetting,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = pg_setting.schema
    PgDatabase.open(pg_setting).close()
    for run_id in ("a", "b"):  # two rows with one ref: the unique index cannot be built
        pg_server.execute(
            f'INSERT INTO "{schema}".run_queue (run_id, status, workflow_ref, serve_key, created_at, updated_at) '
            "VALUES (%s, 'queued', '/same.workflow.py', 'k', 0, 0)",
            (run_id,),
        )
    env = newer_piw(tmp_path / "newer", CONCURRENT)
    failed = cli("db", "migrate", "--database", url_of(pg_setting), env=env)
    assert failed.returncode != 0 and "could not create unique index" in failed.stderr
    invalid = f"SELECT indisvalid FROM pg_index WHERE indexrelid = '\"{schema}\".run_queue_ref'::regclass"
    assert pg_server.execute(invalid) == [(False,)]  # what a failed concurrent build leaves
    assert pg_server.execute(f'SELECT max(version) FROM "{schema}".schema_migrations') == [(LATEST,)]
    pg_server.execute(f"DELETE FROM \"{schema}\".run_queue WHERE run_id = 'b'")
    done = cli("db", "migrate", "--database", url_of(pg_setting), env=env)
    assert done.returncode == 0 and f"Applied {LATEST + 1:04d}" in done.stdout, done.stderr
    assert pg_server.execute(invalid) == [(True,)]
    # a schema created by that piw gets the same index, built in its creating transaction
    fresh = DatabaseSetting(pg_setting.url, schema + "_new")
    monkeypatch.setenv(TEST_MIGRATIONS_ENV, env[TEST_MIGRATIONS_ENV])
    try:
        PgDatabase.open(fresh).close()
        assert pg_server.execute(invalid.replace(schema, fresh.schema)) == [(True,)]
        rows = pg_server.execute(f'SELECT version FROM "{fresh.schema}".schema_migrations ORDER BY 1')
        assert rows == [(version,) for version in [*SHIPPED, LATEST + 1]]
    finally:
        pg_server.execute(f'DROP SCHEMA IF EXISTS "{fresh.schema}" CASCADE')
