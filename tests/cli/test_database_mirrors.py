"""Mirrors are caches (multi-host.md §5 test 11, docs/many-machines.md "Mirrors").

A database-mode run is killed mid-run (``kill -9`` right after its 5th line commits); its mirror is then truncated,
tampered with or deleted. ``piw inspect`` rebuilds the mirror from PostgreSQL and shows what was committed, and
``piw resume`` — which reads PostgreSQL, never the mirror — continues the run without rerunning a finished step
and with the committed outputs, not the tampered ones.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from piw.store.pg.setting import DatabaseSetting
from piw.store.trace import read_trace
from tests.support.cli import Cli
from tests.support.paths import FIXTURES

WORKFLOW = FIXTURES / "workflows" / "slow_steps.workflow.py"


def _mirror(home: Path, run_id: str) -> Path:
    (found,) = list((home / "pg").glob(f"*/runs/{run_id}"))
    return found


@pytest.mark.parametrize("damage", ["truncate", "tamper", "delete"])
def test_a_damaged_mirror_is_rebuilt_by_views_and_never_read_by_resume(
    cli: Cli, piw_home: Path, pg_setting: DatabaseSetting, damage: str
) -> None:
    database = {"PIW_DATABASE": pg_setting.url + f"?schema={pg_setting.schema}"}
    killed = cli.process(
        "run", str(WORKFLOW), "--input", '{"pause": 0}', env={**database, "PIW_TEST_KILL_AFTER_APPEND": "5"}
    )
    assert killed.returncode == -9, killed.stderr
    (run_id,) = [row["runId"] for row in cli.json("runs", env=database)]
    mirror = _mirror(piw_home, run_id)
    trace = mirror / "trace.ndjson"
    good = trace.read_bytes()
    assert len(good.splitlines()) == 5  # run_started, s1 started and finished, s2 started and finished
    if damage == "truncate":
        os.truncate(trace, len(good) // 3)
    elif damage == "tamper":
        trace.write_bytes(good.replace(b'"value":14', b'"value":99'))
    else:
        shutil.rmtree(mirror)

    shown = cli("inspect", run_id, "--json", env=database)
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout)
    assert state["results"]["s1"]["output"] == {"step": "s1", "value": 14}
    assert _mirror(piw_home, run_id).joinpath("trace.ndjson").read_bytes() == good

    if damage == "tamper":  # damage it again, after the view: resume must not read it
        trace.write_bytes(good.replace(b'"value":14', b'"value":99'))
    resumed = cli("resume", run_id, "--json", env=database)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "completed"
    exported = cli("export", run_id, str(piw_home.parent / f"exported-{damage}"), "--json", env=database)
    events = read_trace(Path(json.loads(exported.stdout)["path"]) / "trace.ndjson").events
    finished = [event.node_id for event in events if event.type == "node_finished"]
    assert finished == ["s1", "s2", "s3", "s4", "s5", "s6"]  # nothing finished ran again
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    outputs = {event.node_id: event.payload["output"] for event in events if event.type == "node_finished"}
    assert outputs["s1"] == {"step": "s1", "value": 14}
