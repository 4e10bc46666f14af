"""A step card never shows a blank label (issue 26 item 13): a run title that is empty, whitespace, invisible or not a
string falls back to the workflow name — in the card ``piw run`` prints, in the conversation view and in the live
frame — so no card reads ``▶  › step``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from piw.views.cards import compact_card_lines, expanded_card_lines
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

BLANK_TITLES = ["", "   ", "\t\n", "\u200b", "\u2060\ufeff", 5, True, ["Ship it"], {"title": "x"}]


def _details(title: Any, workflow: Any = "deploy") -> dict[str, Any]:
    return {
        "kind": "step",
        "contract": {"workflowName": workflow, "nodeId": "check", "runId": "r", "attemptId": "a"},
        "presentation": {"runTitle": title, "statusDetail": "Checking"},
    }


@pytest.mark.parametrize("title", BLANK_TITLES, ids=repr)
def test_a_blank_or_non_string_title_falls_back_to_the_workflow_name(title: Any) -> None:
    assert compact_card_lines(_details(title), 80) == ["▶ deploy › check", "Checking"]
    reminder = {**_details(title), "kind": "reminder"}
    assert compact_card_lines(reminder, 80)[0] == "↻ deploy › check · reminder"
    expanded = expanded_card_lines(_details(title), "the prompt", 80)
    assert expanded[0] == "▶ deploy › check"
    assert not any(line.startswith("  run title:") for line in expanded)


def test_a_real_title_still_wins() -> None:
    assert compact_card_lines(_details("Deploy v2"), 80)[0] == "▶ Deploy v2 › check"


@pytest.mark.parametrize("workflow", ["", "  ", None, 3])
def test_without_any_name_the_card_shows_only_the_node(workflow: Any) -> None:
    assert compact_card_lines(_details(" ", workflow), 80)[0] == "▶ check"


FLOW = """
from piw import agent, assistant_message, define_workflow

workflow = define_workflow(
    name="deploy",
    title=lambda input, name: input.get("title", ""),
    start_at="check",
    nodes={"check": agent(prompt="Is it ready?", expected_output=assistant_message(), status_detail="Checking")},
)
"""


@pytest.mark.parametrize(
    ("args", "run_input"),
    [(["--title", "   "], {}), ([], {"title": ""}), ([], {"title": " \t "})],
    ids=["title-flag-blank", "title-function-empty", "title-function-whitespace"],
)
def test_piw_run_prints_the_workflow_name_in_its_card(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path, args: list[str], run_input: dict[str, Any]
) -> None:
    path = make_workflow("deploy", FLOW)
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"text": "Ready."}]), encoding="utf-8")
    done = cli("run", str(path), "--provider", "scripted", "--script", str(script), "--input", json.dumps(run_input),
               *args)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "▶ deploy › check" in lines
    assert lines[0].startswith("● deploy  ")  # the run's head line too
    assert not any(" ›" in line and line.startswith("▶  ") for line in lines)
    conversation = cli("inspect", "--view", "conversation", _only_run(cli.home))
    assert conversation.returncode == 0, conversation.stderr
    assert "▶ deploy › check" in conversation.stdout


def _only_run(home: Path) -> str:
    (run_id,) = [p.name for p in (home / "runs").iterdir() if not p.name.startswith(".")]
    return run_id
