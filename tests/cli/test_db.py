"""``piw db status|migrate|dev`` on a real PostgreSQL, and the database password never shown (``docs/cli.md``,
"piw db"; multi-host.md §5 test 16)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from piw.store.db.rows import NewRun
from piw.store.pg.connection import PgDatabase
from piw.store.pg.migrate import shipped
from piw.store.pg.run_database import open_pg_run_database
from piw.store.pg.setting import DatabaseSetting
from tests.support.cli import Cli
from tests.support.pg import SECRET_USER, PgServer, find_bindir, unavailable


def _with_schema(url: str, schema: str) -> str:
    return f"{url}?schema={schema}"


def test_status_and_migrate_on_a_fresh_schema(cli: Cli, pg_setting: DatabaseSetting) -> None:
    url = _with_schema(pg_setting.url, pg_setting.schema)
    empty = cli("db", "status", "--database", url)
    assert empty.returncode == 0, empty.stderr
    latest = shipped()[-1].version  # numbers may have gaps: each feature takes the one it was given
    assert f"schema    empty: created on first use (this piw: 1..{latest})" in empty.stdout
    migrated = cli("db", "migrate", "--database", url)
    assert (
        migrated.returncode == 0
        and "Applied 0001" in migrated.stdout
        and f"schema version {latest}" in migrated.stdout
    )
    again = cli("db", "migrate", "--database", url)
    assert f"Schema version {latest}" in again.stdout and "nothing to apply" in again.stdout
    database = open_pg_run_database(PgDatabase.open(pg_setting))
    database.queue.enqueue(
        NewRun("r1", "/w.workflow.py", {"kind": "file", "path": "/w.workflow.py"}, "d", {})
    )
    report = cli.json("db", "status", "--database", url)
    assert report["version"] == latest and report["window"] == {"min": 1, "max": latest}
    assert report["pending"] == []
    assert report["counts"] == {"queued": 1} and report["compatible"] is True
    assert (
        report["database"]
        == f"postgresql://piw@127.0.0.1:{url.split(':')[2].split('/')[0]}/postgres?schema={pg_setting.schema}"
    )


def test_without_a_database_db_says_how_to_name_one(cli: Cli) -> None:
    done = cli("db", "status")
    assert done.returncode == 2 and "No database is configured" in done.stderr and "piw db dev" in done.stderr
    typo = cli("db", "stauts")
    assert typo.returncode == 2 and "Did you mean 'status'?" in typo.stderr
    misplaced = cli("db", "status", "--contract")
    assert misplaced.returncode == 2 and "--contract is an option of 'piw db migrate'" in misplaced.stderr


def test_the_password_never_appears_in_errors_json_or_rows(
    cli: Cli, piw_home: Path, pg_server: PgServer, pg_setting: DatabaseSetting
) -> None:
    secret = pg_server.secret_password
    schema = pg_setting.schema
    wrong = cli(
        "db",
        "status",
        "--database",
        f"postgresql://{SECRET_USER}:wrong-{secret}@127.0.0.1:{pg_server.port}/postgres",
    )
    assert wrong.returncode == 2
    assert f"{SECRET_USER}:***@127.0.0.1" in wrong.stderr and "password authentication failed" in wrong.stderr
    assert secret not in wrong.stderr + wrong.stdout
    # in the URL: accepted, with a warning; never printed
    in_url = cli("db", "status", "--json", "--database", _with_schema(pg_server.secret_url(), schema))
    assert in_url.returncode == 0, in_url.stderr
    assert "holds its password" in in_url.stderr and secret not in in_url.stdout + in_url.stderr
    assert json.loads(in_url.stdout)["database"].startswith(f"postgresql://{SECRET_USER}:***@")
    # in config.toml as "$NAME": no warning, nothing shown
    (piw_home / "config.toml").write_text(
        f'[database]\nurl = "postgresql://{SECRET_USER}@127.0.0.1:{pg_server.port}/postgres"\n'
        f'password = "$PIW_DB_PASSWORD"\nschema = "{schema}"\n',
        encoding="utf-8",
    )
    configured = cli("db", "migrate", env={"PIW_DB_PASSWORD": secret})
    assert configured.returncode == 0 and "Applied 0001" in configured.stdout and configured.stderr == ""
    assert secret not in configured.stdout
    # rows written through a setting that holds the password never hold it
    setting = DatabaseSetting(pg_server.secret_url(), schema)
    database = open_pg_run_database(PgDatabase.open(setting))
    database.queue.enqueue(NewRun("r1", "/w.workflow.py", {"kind": "file"}, "d", {"n": 1}), claim_for="me")
    dumped = pg_server.execute(
        "SELECT string_agg(t::text, '|') FROM (SELECT * FROM " + f'"{schema}".run_queue) t'
    )
    assert dumped[0][0] and secret not in dumped[0][0]
    assert (
        secret not in repr(setting)
        and secret not in str(setting)
        and secret not in repr(database.queue.db.pg)
    )


def test_db_dev_starts_a_loopback_server_and_stops_it(cli: Cli, piw_home: Path) -> None:
    if find_bindir() is None:
        unavailable("initdb was not found")  # (skips, or fails under PIW_REQUIRE_POSTGRES=1)
    started = cli("db", "dev", "--json")
    assert started.returncode == 0, started.stderr
    server = json.loads(started.stdout)
    assert server["url"].startswith("postgresql://piw@127.0.0.1:") and server["started"] is True
    data = (piw_home / "pg-dev" / "data").resolve()
    env = {"PIW_DATABASE": server["url"], "PGPASSFILE": server["passfile"]}
    try:
        status = cli("db", "status", env=env)
        assert status.returncode == 0, status.stderr
        assert "schema    empty" in status.stdout and "127.0.0.1" in status.stdout
        again = cli("db", "dev")
        assert "Already running" in again.stdout and f"export PIW_DATABASE={server['url']}" in again.stdout
        assert (Path(server["passfile"]).stat().st_mode & 0o777) == 0o600
    finally:
        stopped = cli("db", "dev", "--stop")
    try:
        assert stopped.returncode == 0 and "Stopped the dev PostgreSQL." in stopped.stdout
        after = cli("db", "status", env=env)
        assert after.returncode == 2 and "Cannot connect to the database" in after.stderr
    finally:
        if not data.is_relative_to(piw_home):  # as root the data lives outside PIW_HOME
            shutil.rmtree(data.parent, ignore_errors=True)
