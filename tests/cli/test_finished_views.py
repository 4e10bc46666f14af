"""Views of finished runs: a branch not taken reads as not taken, plurals are right, and the progress
view says what the run's log line said.

Before, a completed run's unselected branch showed ``· pending``, a single sample read ``1 samples``, and the
progress view of a finished run said ``ETA awaiting a new sample`` where its log had printed ``ETA 1s``.
"""

from __future__ import annotations

import json

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

BRANCH = """
from piw import compute, define_workflow, switch
workflow = define_workflow(
    name="branch", start_at="pick",
    nodes={"pick": compute(lambda c: {"way": c.input.get("way", "left")}),
           "left": compute(lambda c: 1 / c.input.get("divisor", 1)), "right": compute(lambda c: 2)},
    edges=[switch("pick", on="$.way", cases={"left": "left", "right": "right"})],
)
"""

PROGRESS = """
from piw import action, define_workflow
P = "pi-workflows.progress.v1"
def work(ctx):
    for done in (1, 2, 3):
        ctx.publish_update("progress", "rows", {"schema": P, "status": "running", "label": "Rows",
                                                "completed": done, "total": 6, "unit": "rows"})
        ctx.sleep(0.2)
    ctx.publish_update("progress", "once", {"schema": P, "status": "running", "label": "Once",
                                            "completed": 1, "total": 3, "unit": "stages"})
    ctx.sleep(1.5)  # longer than the ETA the last "rows" sample gave: a live view would count it down to nothing
    return {}
workflow = define_workflow(name="prog", start_at="w", nodes={"w": action(work)})
"""


def _card_lines(graph: str, node: str) -> list[str]:
    """The text inside the box whose title row names ``node`` (and the row below it)."""
    rows = graph.splitlines()
    for index, row in enumerate(rows):
        cells = [cell.strip() for cell in row.split("│") if cell.strip()]
        for position, cell in enumerate(cells):
            if cell.split()[:1] == [node]:
                below = [c.strip() for c in rows[index + 1].split("│") if c.strip()]
                return [cell, below[position]]
    raise AssertionError(f"no card for {node}:\n{graph}")


def test_a_branch_not_taken_reads_as_not_taken(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow("branch", BRANCH)
    completed = json.loads(cli("run", str(path), "--json").stdout)["runId"]
    graph = cli("inspect", completed, "--view", "graph").stdout
    assert _card_lines(graph, "right")[1] == "– not taken"
    assert _card_lines(graph, "left")[1].startswith("✓ ok")
    assert "pending" not in graph
    failed = json.loads(cli("run", str(path), "--input", '{"divisor": 0}', "--json").stdout)["runId"]
    graph = cli("inspect", failed, "--view", "graph").stdout
    assert _card_lines(graph, "right")[1] == "– not run"
    assert _card_lines(graph, "left")[1].startswith("✗ failed")


def test_the_progress_view_of_a_finished_run_says_what_its_log_said(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    done = cli("run", str(make_workflow("prog", PROGRESS)))
    assert done.returncode == 0, done.stderr
    logged = {}
    for line in done.stdout.splitlines():
        if line.startswith("  ↳ "):
            text = line[4:]
            logged[text.split()[0]] = text  # the last line per track
    assert "ETA" in logged["Rows"] and "awaiting" not in logged["Rows"]
    view = cli("inspect", "-1", "--view", "progress").stdout.splitlines()
    tracks = {line.split()[0]: line for line in view if not line.startswith(" ")}
    assert tracks == logged
    details = sorted(line.strip().split(" · ")[0] for line in view if line.startswith("  "))
    assert details == ["1 sample", "3 samples"]  # "Once" has one sample: singular
