"""Database mode redacts the home's configured secrets like SQLite mode (docs/guarantees.md, "Redaction of secrets").

A run's bundle in database mode is a mirror under ``PIW_HOME/pg/<database id>/``; the secrets are still the home's
(``PIW_HOME/config.toml``), so a compute step whose output holds a configured key stores ``[REDACTED]`` in the rows
and the mirror, as it does in SQLite mode.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from piw.redaction import REDACTED
from piw.store.pg.setting import DatabaseSetting
from tests.support.cli import Cli
from tests.support.pg import PgServer

KEY = "sk-live-database-mode-0123456789"

FLOW = f"""
from piw import compute, define_workflow

workflow = define_workflow(
    name="leaky-db",
    start_at="leak",
    nodes={{"leak": compute(lambda ctx: {{"said": "the key is {KEY}"}})}},
    edges=[],
)
"""


def test_a_configured_key_in_a_step_output_is_redacted_in_the_rows_and_the_mirror(
    cli: Cli, piw_home: Path, tmp_path: Path, pg_server: PgServer, pg_setting: DatabaseSetting
) -> None:
    (piw_home / "config.toml").write_text(
        textwrap.dedent(
            f"""
            [providers.stub]
            api = "openai-completions"
            base_url = "http://127.0.0.1:9/v1"
            models = ["m"]
            api_key = "{KEY}"
            """
        ),
        encoding="utf-8",
    )
    flow = tmp_path / "leaky.workflow.py"
    flow.write_text(FLOW, encoding="utf-8")
    database = {"PIW_DATABASE": pg_setting.url + f"?schema={pg_setting.schema}"}
    done = cli("run", str(flow), "--json", env=database)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert KEY not in done.stdout

    rows = pg_server.execute(f"SELECT convert_from(line, 'UTF8') FROM \"{pg_setting.schema}\".trace_events")
    stored = "\n".join(str(row[0]) for row in rows)
    assert REDACTED in stored and KEY not in stored
    mirrors = list((piw_home / "pg").rglob("trace.ndjson"))
    assert mirrors and all(KEY not in path.read_text(encoding="utf-8") for path in mirrors)
