"""Ride-along lines in database mode are held for the next statement, but never for long (docs/many-machines.md,
"The trace in rows"): while a step runs for seconds, its ``node_started`` is in the rows for every other host."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg
import pytest

from piw.store.pg.setting import DatabaseSetting
from tests.support.cli import Cli
from tests.support.pg import PgServer

SLOW_STEP = """
import time
from pathlib import Path

from piw import compute, define_workflow

def wait_for_the_test(ctx):
    gate = Path({gate!r})
    deadline = time.monotonic() + 60
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {{"released": gate.exists()}}

workflow = define_workflow(name="held", start_at="slow", nodes={{"slow": compute(wait_for_the_test)}})
"""


def _node_started(server: PgServer, schema: str) -> int:
    try:
        found = server.execute(f"SELECT count(*) FROM \"{schema}\".trace_events WHERE type = 'node_started'")
    except psycopg.errors.UndefinedTable:  # the run has not created its schema yet
        return 0
    return int(found[0][0])


def test_a_long_steps_node_started_reaches_the_rows_while_it_runs(
    cli: Cli, tmp_path: Path, pg_server: PgServer, pg_setting: DatabaseSetting
) -> None:
    gate = tmp_path / "gate"
    flow = tmp_path / "held.workflow.py"
    flow.write_text(SLOW_STEP.format(gate=str(gate)))
    schema = pg_setting.schema
    run = cli.popen("run", str(flow), "--json", env={"PIW_DATABASE": f"{pg_setting.url}?schema={schema}"})
    try:
        deadline = time.monotonic() + 30
        while _node_started(pg_server, schema) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _node_started(pg_server, schema) == 1  # sent while the step still waits for the gate
        assert not gate.exists()
        gate.touch()
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert '"status": "completed"' in out or '"status":"completed"' in out


TWO_ACTIONS = """
import time
from pathlib import Path

from piw import action, define_workflow, edge

def first(ctx):
    gate = Path({gate!r})
    Path({started!r}).touch()
    deadline = time.monotonic() + 60
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {{"first": True}}

def second(ctx):
    Path({second!r}).touch()
    return {{"second": True}}

workflow = define_workflow(
    name="paused", start_at="first",
    nodes={{"first": action(first), "second": action(second)}},
    edges=[edge("first", "second")],
)
"""


@pytest.mark.long
def test_a_pause_asked_during_an_action_takes_effect_where_it_ends(
    cli: Cli, tmp_path: Path, pg_setting: DatabaseSetting
) -> None:
    """The boundary after a step with effects reads the flags from that step's last fenced append, not from a
    row read of its own: the pause asked while the action ran must still stop the run before ``second``."""
    gate, started, second = tmp_path / "gate", tmp_path / "started", tmp_path / "second"
    flow = tmp_path / "paused.workflow.py"
    flow.write_text(TWO_ACTIONS.format(gate=str(gate), started=str(started), second=str(second)))
    env = {"PIW_DATABASE": f"{pg_setting.url}?schema={pg_setting.schema}"}
    run = cli.popen("run", str(flow), "--json", env=env)
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started.exists()
        listed = cli("runs", "--json", env=env)
        run_id = json.loads(listed.stdout)[0]["runId"]
        paused = cli("pause", run_id, env=env)
        assert paused.returncode == 0, paused.stderr
        gate.touch()
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert json.loads(out)["status"] == "running", (out, err)  # paused: running, parked until resumed
    assert not second.exists()  # the step after the pause never started
