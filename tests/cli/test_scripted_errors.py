"""The scripted provider teaches itself.

Before: "needs replies" never mentioned the ``NAME.replies.json`` convention; a reply list keyed by a node the
workflow does not have was silently unused until some request found nothing; and that "no reply" error did not
say which keys the file has.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

FLOW = """
from pydantic import BaseModel
from piw import agent, assistant_message, define_workflow, edge

class Route(BaseModel):
    route: str

workflow = define_workflow(
    name="tri", start_at="classify",
    nodes={"classify": agent(prompt="Classify.", expected_output=Route),
           "answer": agent(prompt="Answer.", expected_output=assistant_message())},
    edges=[edge("classify", "answer")],
)
"""


def _no_runs(home: Path) -> None:
    assert not (home / "runs").exists() or not list((home / "runs").glob("2*"))


def test_needs_replies_names_the_file_beside_the_workflow(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow("tri", FLOW)
    done = cli("run", str(path), "--provider", "scripted")
    assert done.returncode == 2
    assert str(path.with_name("tri.replies.json")) in done.stderr
    assert "NAME.replies.json beside NAME.workflow.py" in done.stderr and "--script FILE" in done.stderr
    _no_runs(cli.home)


def test_a_reply_list_for_an_unknown_node_is_refused_when_the_file_loads(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow("tri", FLOW)
    replies = path.with_name("tri.replies.json")
    replies.write_text(
        json.dumps({"clasify": [{"submit": {"route": "x"}}], "answer": ["Hi"]}), encoding="utf-8"
    )
    done = cli("run", str(path), "--provider", "scripted")
    assert done.returncode == 2
    assert done.stderr == (
        f"Error: {replies} has replies for 'clasify', which is not an agent step of this workflow; "
        "its agent steps are 'answer', 'classify' (use '*' for any step).\n"
    )
    _no_runs(cli.home)  # refused before the first step ran


def test_a_request_with_no_reply_lists_the_keys_the_file_has(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow("tri", FLOW)
    path.with_name("tri.replies.json").write_text(
        json.dumps({"classify": [{"submit": {"route": "x"}}]}), encoding="utf-8"
    )
    done = cli("run", str(path), "--provider", "scripted", "--json")
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert "no reply for request 2 (node answer)" in error
    assert "the script has replies for 'classify'; add a list named 'answer' or '*'" in error


def test_replies_for_children_of_an_action_are_allowed(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "fan",
        """
        from piw import action, define_workflow
        def fan(ctx):
            result = ctx.run_agent("Say hi.", key="one")
            return {"outcome": result.outcome, "output": result.output, "error": result.error}
        workflow = define_workflow(name="fan", start_at="work", nodes={"work": action(fan)})
        """,
    )
    path.with_name("fan.replies.json").write_text(
        json.dumps({"work/one": [{"submit": {"greeting": "Hi there"}}]}), encoding="utf-8"
    )
    done = cli("run", str(path), "--provider", "scripted", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"]["output"] == {"greeting": "Hi there"}
