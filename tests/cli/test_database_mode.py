"""Database mode keeps the same record of a run as SQLite mode (multi-host.md §5 test 2, docs/many-machines.md).

One workflow with every event type (compute with an artifact, an action publishing an update, a shell command, a
notification, an included child, an agent step on the scripted provider, a checkpoint answered by a continuation)
runs once in SQLite mode and once with ``--database``. ``piw export`` of the database runs gives bundles whose trace
lines, conversation, artifacts and fold equal the SQLite runs' with ids and times masked; ``piw import`` of the
SQLite bundles then ``piw export`` gives their files back byte for byte.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from piw.store.fold import fold, state_to_json
from piw.store.pg.setting import DatabaseSetting
from piw.store.trace import read_trace
from tests.support.cli import Cli
from tests.support.paths import FIXTURES

WORKFLOW = FIXTURES / "workflows" / "every_event.workflow.py"
REPLIES = {"plan": [{"submit": {"steps": 3, "title": "release"}}]}
AUTHORITATIVE = ("workflow.json", "manifest.json", "trace.ndjson", "session/entries.ndjson")

_MASKS = [
    (re.compile(r"\d{8}T\d{9}Z-[a-z0-9-]+?-[0-9a-f]{8}"), "RUN"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "TIME"),
    (re.compile(r"\b(ntf|ses|upd|dec)_[0-9a-f-]+"), r"\1_ID"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "HEX"),
    (re.compile(r'"(durationMs|pid|pgid|startTime|elapsedMs|latencyMs)":\s*"?[0-9.]+"?'), r'"\1":0'),
]


def mask(text: str) -> str:
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def _run_pair(cli: Cli, script: Path, env: dict[str, str] | None = None) -> list[str]:
    """Run the workflow to its checkpoint and answer it: the waiting run and its continuation."""
    started = cli("run", str(WORKFLOW), "--provider", "scripted", "--script", str(script), "--json", env=env)
    assert started.returncode == 0, started.stderr
    waiting = json.loads(started.stdout)
    assert waiting["status"] == "waiting"
    answered = cli("answer", waiting["runId"], '{"ok": true}', "--json", env=env)
    assert answered.returncode == 0, answered.stderr
    continuation = json.loads(answered.stdout)
    assert continuation["status"] == "completed"
    return [waiting["runId"], continuation["runId"]]


def _export(cli: Cli, run_id: str, target: Path, env: dict[str, str] | None = None) -> Path:
    done = cli("export", run_id, str(target), "--json", env=env)
    assert done.returncode == 0, done.stderr
    return Path(json.loads(done.stdout)["path"])


def _record(bundle: Path) -> dict[str, Any]:
    """What a reader sees of a bundle, masked: its lines, conversation, artifacts and fold."""
    events = read_trace(bundle / "trace.ndjson").events
    artifacts = (
        sorted(item.name for item in (bundle / "artifacts").iterdir())
        if (bundle / "artifacts").is_dir()
        else []
    )
    return {
        "trace": [mask(line) for line in (bundle / "trace.ndjson").read_text().splitlines()],
        "session": [mask(line) for line in (bundle / "session" / "entries.ndjson").read_text().splitlines()],
        "artifacts": artifacts,
        "fold": mask(json.dumps(state_to_json(fold(events)), sort_keys=True)),
    }


def test_a_database_run_exports_the_sqlite_runs_record_and_import_round_trips(
    cli: Cli, piw_home: Path, tmp_path: Path, pg_setting: DatabaseSetting
) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(REPLIES), encoding="utf-8")
    database = {"PIW_DATABASE": pg_setting.url + f"?schema={pg_setting.schema}"}

    local = _run_pair(cli, script)
    remote = _run_pair(cli, script, database)
    exported = [_export(cli, run_id, tmp_path / "exported", database) for run_id in remote]

    for sqlite_run, database_bundle in zip(local, exported, strict=True):
        sqlite_bundle = piw_home / "runs" / sqlite_run
        assert _record(database_bundle) == _record(sqlite_bundle)
        assert len(_record(sqlite_bundle)["trace"]) > 2

    # The database mode left SQLite alone: the local runs are the two SQLite ones, the database lists its own.
    assert sorted(
        path.name for path in (piw_home / "runs").iterdir() if not path.name.startswith(".")
    ) == sorted(local)
    listed = cli("runs", "--json", env=database)
    assert sorted(row["runId"] for row in json.loads(listed.stdout)) == sorted(remote)

    for run_id in local:
        imported = cli("import", str(piw_home / "runs" / run_id), "--json", env=database)
        assert imported.returncode == 0, imported.stderr
        assert json.loads(imported.stdout)["queueStatus"] == "done"
        again = _export(cli, run_id, tmp_path / "round-trip", database)
        original = piw_home / "runs" / run_id
        for name in AUTHORITATIVE:
            assert (again / name).read_bytes() == (original / name).read_bytes(), name
        assert sorted(p.name for p in (again / "artifacts").iterdir()) == sorted(
            p.name for p in (original / "artifacts").iterdir()
        )
        for item in (original / "artifacts").iterdir():
            assert (again / "artifacts" / item.name).read_bytes() == item.read_bytes()

    refused = cli("import", str(piw_home / "runs" / local[0]), env=database)
    assert refused.returncode == 2
    assert "already in the database" in refused.stderr
