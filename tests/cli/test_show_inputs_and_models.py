"""``piw show`` says what a workflow needs: no model line without agent steps, the inputs the docs use (26.10)."""

from __future__ import annotations

import json

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

MODEL_LINE = "agent steps need a model"


def test_show_hello_lists_name_and_asks_for_no_model(cli: Cli) -> None:
    done = cli("show", "hello")
    assert done.returncode == 0, done.stderr
    assert MODEL_LINE not in done.stdout
    (line,) = [line for line in done.stdout.splitlines() if line.strip().startswith("name ")]
    assert "string" in line and 'default "world"' in line
    fields = cli.json("show", "hello")["input"]["fields"]
    assert [field["name"] for field in fields] == ["name"]
    greeted = cli("run", "hello", "--input", '{"name": "Ada"}')
    assert greeted.returncode == 0 and "✉ Hello, Ada!" in greeted.stdout


def test_show_compose_lists_value(cli: Cli) -> None:
    fields = cli.json("show", "compose")["input"]["fields"]
    assert [(field["name"], field.get("default")) for field in fields] == [("value", 42)]


def test_actions_and_shell_commands_need_no_model(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "acts",
        """
        from piw import ShellCommand, action, define_workflow, edge, shell
        workflow = define_workflow(name="acts", start_at="a", nodes={
            "a": action(lambda ctx: {"ok": True}),
            "b": shell(lambda ctx: ShellCommand(command="true")),
        }, edges=[edge("a", "b")])
        """,
    )
    for name in (str(path), "batch"):
        done = cli("show", name)
        assert done.returncode == 0, done.stderr
        assert MODEL_LINE not in done.stdout, name


def test_an_agent_step_without_shipped_replies_still_needs_a_model(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow(
        "asks",
        """
        from piw import agent, define_workflow
        workflow = define_workflow(name="asks", start_at="a", nodes={"a": agent(prompt="Say hi.")})
        """,
    )
    done = cli("show", str(path))
    assert MODEL_LINE in done.stdout
    assert json.loads(cli("show", "triage", "--json").stdout)["example"]["command"].endswith(
        "--provider scripted"
    )
