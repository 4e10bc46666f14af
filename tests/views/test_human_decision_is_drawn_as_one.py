"""A ``human_decision`` is drawn as what it is, not as a plain ``checkpoint`` (issue 26, confusing).

The trace keeps ``nodeType: checkpoint`` (the engine treats both alike); what a person reads — ``piw graph`` in
every format, the step log of ``piw run``, ``piw inspect --view graph`` — says ``human_decision``, the word
``piw show`` already uses. A plain checkpoint still reads ``checkpoint``.
"""

from __future__ import annotations

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

GATES = """
from piw import checkpoint, compute, define_workflow, edge, human_decision

workflow = define_workflow(
    name="gates",
    start_at="approve",
    nodes={
        "approve": human_decision("ops", ["yes", "no"], "Ship it?"),
        "note": checkpoint("Anything else?"),
    },
    edges=[edge("approve", "note")],
)
"""


def test_graph_and_run_log_name_the_decision(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = str(make_workflow("gates", GATES))
    text = cli("graph", path)
    assert text.returncode == 0, text.stderr
    (approve,) = [line for line in text.stdout.splitlines() if "approve" in line]
    (note,) = [line for line in text.stdout.splitlines() if "note" in line]
    assert "human_decision" in approve and "checkpoint" not in approve
    assert "checkpoint" in note
    assert 'n0["approve<br/>human_decision"]' in cli("graph", path, "--format", "mermaid").stdout
    assert 'n0 [label="approve\\nhuman_decision"];' in cli("graph", path, "--format", "dot").stdout

    run = cli("run", path)
    assert run.returncode == 0, run.stderr
    assert "▶ approve  human_decision" in run.stdout.splitlines()
    run_id = cli.json("runs")[0]["runId"]
    shown = cli("inspect", run_id, "--view", "graph")
    assert "human_decision" in shown.stdout
