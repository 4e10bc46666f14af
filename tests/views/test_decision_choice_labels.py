"""A decision choice without a label is printed once (issue 26, "confusing").

``human_decision(choices=["ship", "hold"])`` gives each choice its id as label, and the waiting message listed
``ship   ship``. A choice whose label is its id now shows the id alone; a real label still follows its id.
"""

from __future__ import annotations

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

GATE = """
from piw import choice, compute, define_workflow, edge, human_decision

workflow = define_workflow(
    name="gate",
    start_at="ask",
    nodes={
        "ask": human_decision(
            audience="you", choices=["ship", "hold", choice("later", "Later, with notes")], request="Ship it?"
        ),
        "done": compute(lambda ctx: ctx.outputs["ask"]),
    },
    edges=[edge("ask", "done")],
)
"""


def test_choices_without_labels_print_their_id_once(cli: Cli, make_workflow: WorkflowMaker) -> None:
    done = cli("run", str(make_workflow("gate", GATE)))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("Choices:")
    assert lines[start + 1 : start + 4] == ["  ship", "  hold", "  later  Later, with notes"]
    run_id = lines[0].split()[-1]
    shown = cli("inspect", run_id)  # the state view shows the open decision the same way
    assert shown.returncode == 0, shown.stderr
    assert "  ship" in shown.stdout.splitlines() and "ship   ship" not in shown.stdout
