"""``piw runs`` tells a gate that still needs an answer from one that was answered (issue 26.5, 26.6).

A waiting run is final: its bundle never changes, whoever answers it. What changed is in ``piw.sqlite`` (the
decision record, the continuation's queue row), and the listing reads it there: ``--status waiting`` is what still
needs someone, ``--status answered`` what was answered (by a person or by its timeout), and an overdue gate says
since when it is due, because only a running ``piw host`` applies the timeout.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

ASK = """
from pydantic import BaseModel
from piw import checkpoint, compute, define_workflow, edge

class Ok(BaseModel):
    ok: bool

workflow = define_workflow(
    name="ask",
    start_at="ask",
    nodes={"ask": checkpoint("Is it ok?", answer=Ok), "after": compute(lambda ctx: {"got": ctx.outputs["ask"]})},
    edges=[edge("ask", "after")],
)
"""

GATE = """
from piw import compute, define_workflow, edge, human_decision, timeout_after

workflow = define_workflow(
    name="gate",
    start_at="gate",
    nodes={
        "gate": human_decision("ops", ["yes", "no"], "Ship it?", on_timeout=timeout_after(10, "no")),
        "after": compute(lambda ctx: {"got": ctx.outputs["gate"]}),
    },
    edges=[edge("gate", "after")],
)
"""


@pytest.fixture
def ask(make_workflow: WorkflowMaker) -> Path:
    return make_workflow("ask", ASK)


@pytest.fixture
def gate(make_workflow: WorkflowMaker) -> Path:
    return make_workflow("gate", GATE)


def _waiting(cli: Cli, path: Path) -> str:
    done = cli("run", str(path), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "waiting"
    return str(result["runId"])


def _in_the_past(path: Path, home: Path, minutes: float) -> str:
    """Start ``path`` with an engine clock ``minutes`` ago, so its gate's deadline is that much older."""
    from piw.run.runner import ForegroundOptions, start_run

    then = datetime.now(UTC) - timedelta(minutes=minutes)
    state = start_run(str(path), home, {}, None, ForegroundOptions(clock=lambda: then))
    assert state.status == "waiting"
    return str(state.run_id)


def _rows(cli: Cli, *args: str) -> dict[str, dict[str, Any]]:
    done = cli("runs", "--json", *args)
    assert done.returncode == 0, done.stderr
    return {row["runId"]: row for row in json.loads(done.stdout)}


def _line(cli: Cli, run_id: str, *args: str) -> str:
    done = cli("runs", *args, env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(run_id)]
    return line


def test_an_answered_checkpoint_is_no_longer_listed_as_waiting(cli: Cli, ask: Path) -> None:
    answered = _waiting(cli, ask)
    open_one = _waiting(cli, ask)
    done = cli("answer", answered, '{"ok": true}', "--json")
    assert done.returncode == 0, done.stderr
    continuation = json.loads(done.stdout)["runId"]

    assert f"answered → {continuation}" in _line(cli, answered)
    assert re.search(rf"^{open_one}\s+waiting\s", _line(cli, open_one))
    assert set(_rows(cli, "--status", "waiting")) == {open_one}
    assert set(_rows(cli, "--status", "answered")) == {answered}
    listed = cli("runs", "--status", "waiting")
    assert answered not in listed.stdout and open_one in listed.stdout

    rows = _rows(cli)
    assert rows[answered]["status"] == "waiting"  # the run's own status, as for running runs
    assert rows[answered]["wait"] == {
        "state": "answered",
        "provenance": "human",
        "continuationRunId": continuation,
        "dueAt": None,
        "overdue": False,
    }
    assert rows[open_one]["wait"]["state"] == "open"
    assert rows[continuation]["wait"] is None


def test_a_gate_its_timeout_answered_reads_timed_out(cli: Cli, gate: Path) -> None:
    parent = _in_the_past(gate, cli.home, minutes=11)
    host = cli("host", "--once")
    assert host.returncode == 0, host.stderr
    (continuation,) = [run for run in _rows(cli) if run != parent]
    assert f"timed out → {continuation}" in _line(cli, parent)
    wait = _rows(cli)[parent]["wait"]
    assert (wait["state"], wait["provenance"], wait["continuationRunId"]) == (
        "answered",
        "timeout",
        continuation,
    )
    assert parent in _rows(cli, "--status", "answered") and parent not in _rows(cli, "--status", "waiting")


def test_an_overdue_gate_says_since_when_it_is_due_and_who_applies_the_timeout(cli: Cli, gate: Path) -> None:
    overdue = _in_the_past(gate, cli.home, minutes=12)
    due = (datetime.now(UTC) - timedelta(minutes=2)).strftime("%Y-%m-%d %H:%M")
    line = _line(cli, overdue)
    assert f"waiting (due since {due}" in line
    assert overdue in _rows(cli, "--status", "waiting")  # it still needs an answer (or a host)
    wait = _rows(cli)[overdue]["wait"]
    assert wait["state"] == "open" and wait["overdue"] is True
    assert wait["dueAt"].startswith(due.replace(" ", "T"))
    listed = cli("runs")
    assert "'piw host'" in listed.stdout  # the footer says what applies an overdue timeout

    shown = cli("inspect", overdue)
    assert shown.returncode == 0, shown.stderr
    assert "due since " in shown.stdout
    assert "The timeout fires only while 'piw host' runs" in shown.stdout


def test_the_waiting_message_says_a_host_must_run_for_the_timeout_to_fire(cli: Cli, gate: Path) -> None:
    done = cli("run", str(gate))
    assert done.returncode == 0, done.stderr
    assert "Without an answer it continues with no at " in done.stdout
    assert "The timeout fires only while 'piw host' runs" in done.stdout
    assert "due since" not in done.stdout


def test_a_cancelled_waiting_run_needs_no_answer(cli: Cli, ask: Path) -> None:
    run_id = _waiting(cli, ask)
    assert cli("cancel", run_id).returncode == 0
    assert run_id not in _rows(cli, "--status", "waiting")
    assert run_id in _rows(cli, "--status", "cancelled")
    assert "waiting (cancelled)" in _line(cli, run_id)
    assert _rows(cli)[run_id]["wait"]["state"] == "cancelled"


def test_an_unknown_status_names_the_new_filter(cli: Cli) -> None:
    done = cli("runs", "--status", "answred")
    assert done.returncode == 2
    assert "answered" in done.stderr
