"""``inspect --node`` with a node the run does not have, and a mistyped ``--view``, are errors that suggest the
closest name (issue 26, confusing); before, an unknown node printed an empty table and exited 0."""

from __future__ import annotations

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

COMPOSE = """
from piw import compute, define_workflow, edge, include

child = define_workflow(name="child", start_at="measure", nodes={"measure": compute(lambda ctx: 1)})
workflow = define_workflow(
    name="parent", start_at="prepare",
    nodes={"prepare": compute(lambda ctx: 0), "finish": compute(lambda ctx: 2)},
    includes={"checker": include(child)},
    edges=[edge("prepare", "checker"), edge("checker", "finish")],
)
"""


def _run(cli: Cli, make_workflow: WorkflowMaker) -> str:
    done = cli("run", str(make_workflow("parent", COMPOSE)), "--json")
    assert done.returncode == 0, done.stderr
    return str(cli.json("runs")[0]["runId"])


def test_an_unknown_node_is_an_error_with_the_closest_name(cli: Cli, make_workflow: WorkflowMaker) -> None:
    run_id = _run(cli, make_workflow)
    for view in ("steps", "trace"):
        done = cli("inspect", run_id, "--view", view, "--node", "prepar")
        assert done.returncode == 2, done.stdout
        assert done.stderr.startswith(f"Error: Run {run_id} has no node 'prepar'. Did you mean 'prepare'?")
        assert "checker/measure" in done.stderr and len(done.stderr.splitlines()) == 1
    for node in ("prepare", "checker", "checker/measure"):  # a mount path filters everything under it
        assert cli("inspect", run_id, "--view", "trace", "--node", node).returncode == 0


def test_a_mistyped_view_suggests_the_closest(cli: Cli, make_workflow: WorkflowMaker) -> None:
    run_id = _run(cli, make_workflow)
    done = cli("inspect", run_id, "--view", "stpes")
    assert done.returncode == 2
    assert done.stderr.startswith(
        "Error: Unknown view 'stpes'. Did you mean 'steps'? Use one of: state, graph,"
    )
