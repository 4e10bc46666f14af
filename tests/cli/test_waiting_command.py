"""``piw waiting`` (issue 31.4): what needs an answer across runs, with the command that answers it and the route of
``piw serve``; an answered or cancelled gate leaves the list.
"""

from __future__ import annotations

import json
import shlex

from tests.serve.test_answers import ASK, GATE, waiting_run
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker


def test_waiting_lists_open_gates_with_commands_and_api_routes(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    assert cli("waiting").stdout.strip() == "Nothing waits for an answer."
    gate = waiting_run(cli, make_workflow("gate", GATE))["runId"]
    ask = waiting_run(cli, make_workflow("ask", ASK))["runId"]
    other = waiting_run(cli, make_workflow("gate", GATE))["runId"]
    items = cli.json("waiting", "--api", "https://piw.example:9000")
    assert [item["runId"] for item in items] == [other, ask, gate]
    by_id = {item["runId"]: item for item in items}
    assert by_id[gate]["kind"] == "human_decision" and by_id[gate]["question"] == "Ship it?"
    assert by_id[gate]["commands"] == [f"piw decide {gate} yes", f"piw decide {gate} no"]
    assert by_id[gate]["apiUrl"] == f"https://piw.example:9000/api/runs/{gate}/decide"
    assert by_id[gate]["requestSha256"].startswith("sha256:")
    assert by_id[ask]["kind"] == "checkpoint" and by_id[ask]["apiUrl"].endswith(f"/api/runs/{ask}/answer")
    shown = cli("waiting")
    assert f"piw decide {gate} yes" in shown.stdout
    assert f"POST http://127.0.0.1:8780/api/runs/{ask}/answer" in shown.stdout
    # the printed command works as it is, and the answered gate leaves the list; a cancelled one too
    command = shlex.split(by_id[ask]["commands"][0])
    assert cli(*command[1:]).returncode == 0
    assert cli("cancel", other).returncode == 0
    assert [item["runId"] for item in cli.json("waiting")] == [gate]
    assert json.loads(cli("runs", "--status", "waiting", "--json").stdout)[0]["runId"] == gate
