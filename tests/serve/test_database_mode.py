"""``piw serve`` and ``piw tokens`` in database mode (issue 31.2, ``docs/many-machines.md``): the tokens live in the
PostgreSQL schema (migration 0004), the API reads the database's runs and an answer over HTTP is the database's one
winner, recorded with the token's name.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from piw.store.pg.setting import DatabaseSetting
from tests.serve.test_answers import GATE
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker
from tests.support.serve import served


def test_tokens_and_answers_live_in_the_database(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker, pg_setting: DatabaseSetting
) -> None:
    env = {"PIW_DATABASE": pg_setting.url + f"?schema={pg_setting.schema}"}
    done = cli("run", str(make_workflow("gate", GATE)), "--json", env=env)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    run_id, digest = run["runId"], run["finalOutput"]["requestSha256"]
    created = cli("tokens", "create", "pg-alice", "--scope", "answer", "--json", env=env)
    assert created.returncode == 0, created.stderr
    token = json.loads(created.stdout)["token"]
    assert [row["name"] for row in cli.json("tokens", "list", env=env)] == ["pg-alice"]
    assert cli.json("tokens", "list") == [], "SQLite mode has its own tokens"
    with served(cli, env=env) as api:
        listed = api.get("/api/runs", token)
        decided = api.post(f"/api/runs/{run_id}/decide", token, {"choice": "yes", "requestSha256": digest})
        output = api.output
    assert [row["runId"] for row in listed.json()] == [run_id]
    assert decided.status_code == 200, decided.text
    assert decided.json()["humanDecision"]["answeredBy"] == "pg-alice"
    assert cli.json("inspect", run_id, env=env)["decision"]["answeredBy"] == "pg-alice"
    assert token not in output
    sqlite_file = piw_home / "piw.sqlite"
    if sqlite_file.exists():
        with sqlite3.connect(sqlite_file) as db:
            assert db.execute("SELECT count(*) FROM api_tokens").fetchone()[0] == 0
