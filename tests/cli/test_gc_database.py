"""``piw gc`` in database mode: the rows removed in one transaction, archived first, dropped from every host's
mirrors, and brought back whole with ``piw import`` (``docs/cli.md``, "Retention")."""

from __future__ import annotations

import json
from pathlib import Path

from piw.store.pg.setting import DatabaseSetting
from tests.support.cli import Cli
from tests.support.pg import PgServer
from tests.support.runs import WorkflowMaker

HELLO = """
from piw import compute, define_workflow
workflow = define_workflow(name="hello", start_at="a", nodes={"a": compute(lambda c: {"hi": c.input.get("who")})})
"""


def test_gc_removes_a_database_run_everywhere_and_import_brings_it_back(
    cli: Cli,
    tmp_path: Path,
    make_workflow: WorkflowMaker,
    pg_setting: DatabaseSetting,
    pg_server: PgServer,
) -> None:
    database = {"PIW_DATABASE": pg_setting.url + f"?schema={pg_setting.schema}"}
    schema = pg_setting.schema
    flow = make_workflow("hello", HELLO)
    first = json.loads(cli("run", str(flow), "--input", '{"who": "a"}', "--json", env=database).stdout)[
        "runId"
    ]
    kept = json.loads(cli("run", str(flow), "--input", '{"who": "b"}', "--json", env=database).stdout)[
        "runId"
    ]
    other = Cli(tmp_path / "machine-b", tmp_path)
    other.home.mkdir()
    assert {row["runId"] for row in other.json("runs", "--json", env=database)} == {first, kept}  # mirrored
    inspected = cli.json("inspect", first, "--json", env=database)
    archive = tmp_path / "archive"
    done = cli.json(
        "gc", "--older-than", "0s", "--keep-last", "1", "--export", str(archive), "--json", env=database
    )
    assert [item["runId"] for item in done["removed"]] == [first] and done["freedBytes"] > 0
    for table in ("run_queue", "trace_events", "run_bundles", "session_entries"):
        count = pg_server.execute(f'SELECT count(*) FROM "{schema}".{table} WHERE run_id = %s', (first,))
        assert count == [(0,)], table
    assert [row["runId"] for row in cli.json("runs", "--json", env=database)] == [kept]
    assert [row["runId"] for row in other.json("runs", "--json", env=database)] == [
        kept
    ]  # its mirror dropped
    assert not (other.home / "pg").exists() or not any((other.home / "pg").glob(f"*/runs/{first}"))
    brought = cli("import", str(archive / first), env=database)
    assert brought.returncode == 0, brought.stderr
    assert cli.json("inspect", first, "--json", env=database) == inspected
    assert sorted(row["runId"] for row in other.json("runs", "--json", env=database)) == sorted([first, kept])
